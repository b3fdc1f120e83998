package bench

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/custody-dev/custody/backend/docker"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/workspace"
)

// BenchPack is the 5-service pack both custody and docker-compose bring up:
// two internal networks, one named volume, listeners and sleep loops on the
// busybox test image (already on the daemon: nothing is pulled). It has no
// custody-only key.
//
//go:embed testdata/pack/compose.yaml
var BenchPack []byte

// PackImage is the image reference BenchPack's services use.
const PackImage = "custody-test/busybox:latest"

// packActor and packPolicy: the one pack actor the bench issues grants to,
// with room for BenchPack and nothing else.
const packActor = "bench"

const packPolicy = `apiVersion: custody.dev/v1alpha1
kind: Policy
images: []
` + policyLimits + `packs:
  actors:
    - name: bench
      submitters: {uids: [0]}
      images:
        - reference: %s
      ceilings:
        service: {memory: 64Mi, cpu: 0.25, pids: 64}
        pack: {memory: 1Gi, cpu: 2, pids: 512}
        services: 5
`

// PackBench is custody's workspace manager, in this process, on an
// isolated engine, next to docker-compose on the same engine: the manager
// custodyd runs a pack with, measured in-process, so custody's figure is
// its Up and Down without the CLI and the daemon's socket in front.
type PackBench struct {
	host    string
	dir     string // the pack's directory (relative paths resolve here)
	compose string // docker-compose binary
	// composeFile is BenchPack without its top-level name: docker-compose
	// 1.29 predates that key (its schema refuses it); -p carries the name.
	composeFile string
	project     string
	db          *store.DB
	eng         *docker.Docker
	cli         *client.Client
	m           *workspace.Manager
}

// PackOptions say where to run.
type PackOptions struct {
	// Host is the isolated engine, unix://<socket>.
	Host string
	// Dir is a fresh private directory for the store, keys and the pack.
	Dir string
	// Compose is the docker-compose binary; "" means from PATH.
	Compose string
}

// ErrNoCompose means docker-compose is not installed; the pack row then
// says so.
var ErrNoCompose = errors.New("docker-compose not installed (make bench-deps installs Debian's docker-compose)")

var topName = regexp.MustCompile(`(?m)^name:[ \t]*([a-z0-9][a-z0-9_-]*)[ \t]*\n`)

// NewPackBench opens the store, keys and engine and makes the manager.
func NewPackBench(ctx context.Context, o PackOptions) (*PackBench, error) {
	compose, err := exec.LookPath(cmpOr(o.Compose, "docker-compose"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoCompose, err)
	}
	m := topName.FindSubmatch(BenchPack)
	if m == nil {
		return nil, errors.New("bench pack has no top-level name")
	}
	p := &PackBench{host: o.Host, dir: filepath.Join(o.Dir, "pack"), compose: compose, project: string(m[1])}
	for _, d := range []string{p.dir, filepath.Join(o.Dir, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	p.composeFile = filepath.Join(p.dir, "compose.yaml")
	if err := os.WriteFile(p.composeFile, topName.ReplaceAll(BenchPack, nil), 0o600); err != nil {
		return nil, err
	}
	polPath := filepath.Join(o.Dir, "policy.yaml")
	pol := fmt.Appendf(nil, packPolicy, PackImage)
	if err := os.WriteFile(polPath, pol, 0o600); err != nil {
		return nil, err
	}
	issuer, _, err := keys.LoadOrCreate(o.Dir, "issuer")
	if err != nil {
		return nil, err
	}
	runner, _, err := keys.LoadOrCreate(o.Dir, "runner")
	if err != nil {
		return nil, err
	}
	if p.db, err = store.Open(filepath.Join(o.Dir, "custody.db")); err != nil {
		return nil, err
	}
	if p.cli, err = client.NewClientWithOpts(client.WithHost(o.Host), client.WithAPIVersionNegotiation()); err != nil {
		p.Close()
		return nil, err
	}
	if p.eng, err = docker.Open(ctx, o.Host, nil); err != nil {
		p.Close()
		return nil, err
	}
	p.m, err = workspace.New(workspace.Config{
		DB: p.db, Engine: docker.NewPacks(p.eng, docker.ProbeOptions{Image: PackImage}),
		Policy: func() (*policy.Policy, string, error) {
			b, err := os.ReadFile(polPath)
			if err != nil {
				return nil, "", err
			}
			pp, err := policy.Parse(b)
			return pp, policy.Digest(b), err
		},
		Issuer: issuer, Runner: runner, Trusted: []*keys.Verifier{issuer.Verifier()}, RunnerID: runner.ID(),
		EngineSocket: strings.TrimPrefix(o.Host, "unix://"),
		// Apart from the daemon's default pools, which compose's networks
		// come from.
		SubnetPool: netip.MustParsePrefix("10.213.0.0/16"), StateDir: filepath.Join(o.Dir, "run"),
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Close closes the store and the engine client.
func (p *PackBench) Close() {
	if p.eng != nil {
		p.eng.Close()
	}
	if p.cli != nil {
		p.cli.Close()
	}
	if p.db != nil {
		p.db.Close()
	}
}

// builtinNetworks are the engine's own networks, there before any pack.
var builtinNetworks = map[string]bool{"bridge": true, "host": true, "none": true}

// Residue lists every container, non-builtin network and volume on the
// engine: between runs there must be none, so each run starts clean.
func (p *PackBench) Residue(ctx context.Context) ([]string, error) {
	var left []string
	cs, err := p.cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs {
		left = append(left, "container "+strings.Join(c.Names, ","))
	}
	ns, err := p.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	for _, n := range ns {
		if !builtinNetworks[n.Name] {
			left = append(left, "network "+n.Name)
		}
	}
	vs, err := p.cli.VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vs.Volumes {
		left = append(left, "volume "+v.Name)
	}
	return left, nil
}

// ComposeVersion is the first line of `docker-compose version`.
func (p *PackBench) ComposeVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, p.compose, "version", "--short").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// Issue admits BenchPack and mints a single-use grant for it (not timed:
// the operator issues it before the user brings the pack up).
func (p *PackBench) Issue(ctx context.Context) ([]byte, error) {
	return p.m.Issue(ctx, BenchPack, p.dir, packActor, time.Hour)
}

// Up is custody's timed up: verify the grant, spend it, journal, realize
// the five services, sign the receipt.
func (p *PackBench) Up(ctx context.Context, grantEnvelope []byte, name string) error {
	rep, err := p.m.Up(ctx, grantEnvelope, name, workspace.Peer{UID: 0, GID: 0, PID: int32(os.Getpid()), Known: true})
	if err != nil {
		return fmt.Errorf("custody pack up %s: %w", name, err)
	}
	if rep.State != workspace.StateRunning || len(rep.Receipt) == 0 {
		return fmt.Errorf("custody pack up %s: state %s, receipt %d bytes: %s", name, rep.State, len(rep.Receipt), rep.Detail)
	}
	return nil
}

// Down is custody's timed down, volumes included (as compose down -v):
// stop, remove, verify every object gone, sign the receipt.
func (p *PackBench) Down(ctx context.Context, name string) error {
	rep, err := p.m.Down(ctx, name, true)
	if err != nil {
		return fmt.Errorf("custody pack down %s: %w", name, err)
	}
	if rep.State != workspace.StateClean || len(rep.Receipt) == 0 {
		return fmt.Errorf("custody pack down %s: state %s, receipt %d bytes: %s", name, rep.State, len(rep.Receipt), rep.Detail)
	}
	return nil
}

func (p *PackBench) composeRun(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, p.compose, append([]string{"-f", p.composeFile, "-p", p.project}, args...)...)
	// Only the isolated engine: no inherited DOCKER_* or COMPOSE_* setting.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "DOCKER_HOST=" + p.host}
	cmd.Dir = p.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker-compose %s: %w: %s", strings.Join(args, " "), err, lastLines(out.String(), 5))
	}
	return nil
}

// ComposeUp is `docker-compose up -d` of the same pack.
func (p *PackBench) ComposeUp(ctx context.Context) error { return p.composeRun(ctx, "up", "-d") }

// ComposeDown is `docker-compose down -v`: containers, networks and the
// volume, as custody's down with volumes.
func (p *PackBench) ComposeDown(ctx context.Context) error { return p.composeRun(ctx, "down", "-v") }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
