package docker

// The docker backend of the phase contract (backend.Backend): one launch
// is one container on the engine, made from the Spec's rootfs imported as
// an image, with the network off, a read-only rootfs, every capability
// dropped, no-new-privileges, the engine's default seccomp profile, the
// Spec's budgets as cgroup limits, and the same bounded output filesystem
// (internal/outputfs) the oci backend mounts, bound in. Everything is
// recorded before it is made and removed only after its native identity
// was checked against the record.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/moby/go-archive"
	"github.com/moby/go-archive/compression"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/platform"
)

// backend.Resource kinds a phase launch records beside KindContainer.
const (
	// KindPhaseDir is the launch's private directory on the host.
	KindPhaseDir = "docker-launch-dir"
	// KindPhaseOutput is the bounded output tmpfs bound into the container.
	KindPhaseOutput = "docker-output-mount"
	// KindPhaseImage is the launch's own tag on the cached rootfs image.
	KindPhaseImage = "docker-image-tag"
)

// LabelRootfs marks an image custody imported from a rootfs tree: its
// value is the tree's digest, the cache key. It is for an operator to see
// and prune by; the backend finds its images through its own index.
const LabelRootfs = LabelPrefix + "rootfs"

// Logical names of a launch's objects in its workspace.
const (
	phaseContainer = "phase"
	phaseImage     = "image"
)

// ErrPhaseSpec means a Spec was refused before anything was made.
var ErrPhaseSpec = errors.New("docker phase spec refused")

// PhaseOptions configure a PhaseBackend.
type PhaseOptions struct {
	// Docker is the engine, opened with Open.
	Docker *Docker
	// Engine is the engine's profile from Probe; nil claims no tier.
	Engine *backend.PackEngine
	// StateDir is a root-only directory for launch dirs, the image cache's
	// index and the key that derives workspace ids; it is made if missing.
	StateDir string
	// MaxLogBytes bounds what each stream passes on; 0 means 8 MiB.
	MaxLogBytes int64
	Log         *slog.Logger
}

// PhaseBackend runs phase launches as containers on one engine.
type PhaseBackend struct {
	opts     PhaseOptions
	d        *Docker
	key      []byte
	identity backend.Identity
	notes    []string
	// unproved says why the dockerd binary could not be identified.
	unproved string
	// importMu serialises the image cache's lookup and import: two
	// launches importing one tree at once would each move the cache tag,
	// leaving the first image tagged only by its launch, so that launch's
	// untag deletes an image the index still names.
	importMu sync.Mutex
}

var (
	_ backend.Backend = (*PhaseBackend)(nil)
	_ backend.Sandbox = (*phaseSandbox)(nil)
)

var (
	phaseIDRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,63}$`)
	launchTagRe = regexp.MustCompile(`^` + NamePrefix + `[0-9a-f]{12}-` + phaseImage + `$`)
)

// NewPhase makes the backend: it reads the engine's version and, when the
// daemon is a local unix socket, the binary serving it (SO_PEERCRED, as
// the probe does), and loads or makes the workspace key.
func NewPhase(ctx context.Context, opts PhaseOptions) (*PhaseBackend, error) {
	if opts.Docker == nil {
		return nil, errors.New("docker phase backend: no engine")
	}
	if !filepath.IsAbs(opts.StateDir) {
		return nil, fmt.Errorf("docker phase backend: state dir %q must be absolute", opts.StateDir)
	}
	if opts.MaxLogBytes == 0 {
		opts.MaxLogBytes = 8 << 20
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "launches"), 0o700); err != nil {
		return nil, fmt.Errorf("docker phase backend: state dir: %w", err)
	}
	key, err := workspaceKey(filepath.Join(opts.StateDir, "workspace.key"))
	if err != nil {
		return nil, err
	}
	b := &PhaseBackend{opts: opts, d: opts.Docker, key: key,
		// Measured on dockerd 20.10: the engine sets these when the Spec
		// does not, so the workload's environment is not exactly Env.
		notes: []string{"the engine adds HOSTNAME and HOME to a container's environment when the Spec does not set them"}}
	ver, err := b.d.cli.ServerVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker phase backend: engine version: %w", err)
	}
	b.identity = backend.Identity{Kind: string(backend.KindDocker), Version: ver.Version}
	if path, sum, err := b.d.daemonBinary(ctx); err != nil {
		b.unproved = err.Error()
		b.notes = append(b.notes, "identity has no dockerd binary digest: "+err.Error())
	} else {
		b.identity.Path, b.identity.SHA256 = path, sum
	}
	return b, nil
}

// workspaceKey loads the key that turns a launch id into its workspace id,
// or makes it: workspace ids must be unguessable (names never prove
// ownership) yet the same for Intents, Prepare and a later Recover.
func workspaceKey(p string) ([]byte, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		data = make([]byte, 32)
		if _, err := rand.Read(data); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("workspace key: %w", err)
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return nil, fmt.Errorf("workspace key: %w", err)
		}
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("workspace key: %w", err)
		}
		return data, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workspace key: %w", err)
	}
	if len(data) != 32 {
		return nil, fmt.Errorf("workspace key %s is %d bytes, want 32: remove it only if no launch is pending recovery", p, len(data))
	}
	return data, nil
}

// daemonBinary is the path and SHA-256 of the dockerd serving the local
// socket, read through /proc/<pid>/exe (the bytes that run, even if the
// file was replaced since).
func (d *Docker) daemonBinary(ctx context.Context) (string, string, error) {
	path, ok := unixPath(d.host)
	if !ok {
		return "", "", fmt.Errorf("%s is not a local unix socket, so its server cannot be seen", d.host)
	}
	pid, err := peerPid(ctx, path)
	if err != nil {
		return "", "", err
	}
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	target, err := os.Readlink(exe)
	if err != nil {
		return "", "", fmt.Errorf("the socket's server pid %d: %w", pid, err)
	}
	if filepath.Base(target) != "dockerd" {
		return "", "", fmt.Errorf("%s is served by %s (pid %d), not dockerd", path, target, pid)
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", target, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", fmt.Errorf("read %s: %w", target, err)
	}
	return target, hex.EncodeToString(h.Sum(nil)), nil
}

// Name is "docker".
func (b *PhaseBackend) Name() string { return string(backend.KindDocker) }

// Identity is the engine's version and, when provable, the dockerd binary.
func (b *PhaseBackend) Identity() backend.Identity { return b.identity }

// Notes say what the backend could not prove about itself.
func (b *PhaseBackend) Notes() []string { return append([]string(nil), b.notes...) }

// Capabilities map the probe's profile to what this backend enforces. The
// development tier needs the network off (network_mode none, always
// available), a read-only rootfs, every capability dropped,
// no-new-privileges, the engine's seccomp and cgroup limits; what the
// engine or host cannot show is a gap. The production tier is never
// claimed: its profile is observed before the workload executes (oci's
// gate) under custody's own seccomp filter, and here the workload runs
// before it can be observed, under the engine's default profile.
func (b *PhaseBackend) Capabilities() backend.Capabilities {
	e := b.opts.Engine
	caps := backend.Capabilities{}
	if e == nil {
		caps.Controls = []backend.Gap{{Requirement: "backend.docker.profile", Code: "engine-not-probed",
			Detail: "the engine's capability profile was not probed", Fix: "probe the engine (Docker.Probe) and pass the profile"}}
		return caps
	}
	caps.UserNamespace = e.UsernsRemap || e.Rootless
	var dev []backend.Gap
	if e.Boundary != BoundaryNative {
		dev = append(dev, backend.Gap{Requirement: "tier.development.boundary", Code: "boundary-not-native",
			Detail: fmt.Sprintf("the engine's boundary is %q: its containers' processes, mounts and cgroups cannot be observed from this host", e.Boundary),
			Fix:    "run a local dockerd on this host's kernel"})
	}
	if !e.Seccomp {
		dev = append(dev, backend.Gap{Requirement: "tier.development.seccomp", Code: "seccomp-missing",
			Detail: "the engine reports no seccomp support", Fix: "use an engine built with seccomp"})
	}
	if e.CgroupVersion != "1" && e.CgroupVersion != "2" {
		dev = append(dev, backend.Gap{Requirement: "tier.development.cgroup", Code: "cgroup-unknown",
			Detail: fmt.Sprintf("the engine reports cgroup version %q: memory, pids and cpu limits are not proved", e.CgroupVersion),
			Fix:    "use an engine on cgroup v1 or v2"})
	}
	if b.identity.SHA256 == "" {
		dev = append(dev, backend.Gap{Requirement: "tier.development.identity", Code: "engine-binary-unproved",
			Detail: "the dockerd binary serving the socket could not be identified: " + b.unproved,
			Fix:    "name a local unix socket served by dockerd on this host"})
	}
	prod := []backend.Gap{
		{Requirement: "tier.production.observed-before-exec", Code: "backend-observes-after-start",
			Detail: "the docker backend observes the container after its workload has started; production needs the profile observed before the workload runs",
			Fix:    "run production launches on the oci backend"},
		{Requirement: "tier.production.seccomp", Code: "engine-default-seccomp",
			Detail: "the container runs under the engine's default seccomp profile, not custody's reviewed filter",
			Fix:    "run production launches on the oci backend"},
	}
	if !caps.UserNamespace {
		prod = append(prod, backend.Gap{Requirement: "tier.production.user-namespace", Code: "user-namespace-missing",
			Detail: "the engine runs containers' root as host root (no userns-remap, not rootless)",
			Fix:    "configure dockerd with userns-remap, or use the oci backend"})
	}
	prod = append(prod, dev...)
	caps.Tiers = map[string][]backend.Gap{platform.TierDevelopment: dev, platform.TierProduction: prod}
	return caps
}

// workspace is the launch's workspace id: keyed, so it is unguessable, and
// the same in every process that holds the key.
func (b *PhaseBackend) workspace(id string) string {
	m := hmac.New(sha256.New, b.key)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

func (b *PhaseBackend) launchDir(id string) string {
	return filepath.Join(b.opts.StateDir, "launches", id)
}

// Intents lists a launch's launch dir, output mount, image tag and
// container, before any exists.
func (b *PhaseBackend) Intents(id string) ([]backend.Resource, error) {
	if !phaseIDRe.MatchString(id) {
		return nil, fmt.Errorf("%w: launch id %q: want [a-z0-9][a-z0-9-]{2,63}", ErrPhaseSpec, id)
	}
	dir, ws := b.launchDir(id), b.workspace(id)
	return []backend.Resource{
		{Kind: KindPhaseDir, Name: dir, State: "intent"},
		{Kind: KindPhaseOutput, Name: filepath.Join(dir, "out"), State: "intent"},
		{Kind: KindPhaseImage, Name: NativeName(ws, phaseImage), State: "intent"},
		{Kind: KindContainer, Name: NativeName(ws, phaseContainer), State: "intent"},
	}, nil
}

// checkSpec refuses a Spec before anything is made: every budget is
// finite and required, paths are absolute and the rootfs is a directory.
func checkSpec(s backend.Spec) error {
	var bad []string
	for name, v := range map[string]int64{"OutputBytes": s.OutputBytes, "OutputFiles": s.OutputFiles, "TmpBytes": s.TmpBytes,
		"Memory": s.Memory, "Pids": s.Pids, "FileSize": s.FileSize} {
		if v <= 0 {
			bad = append(bad, name+" must be positive")
		}
	}
	if s.CPU <= 0 {
		bad = append(bad, "CPU must be positive")
	}
	if len(s.Args) == 0 {
		bad = append(bad, "Args is empty")
	}
	if !filepath.IsAbs(s.OutputPath) || filepath.Clean(s.OutputPath) == "/" {
		bad = append(bad, fmt.Sprintf("OutputPath %q must be an absolute path below /", s.OutputPath))
	}
	for _, in := range s.Inputs {
		if !filepath.IsAbs(in.Source) || !filepath.IsAbs(in.Target) {
			bad = append(bad, fmt.Sprintf("input %s -> %s must name absolute paths", in.Source, in.Target))
		}
		// Capabilities claim no WritableInputs: never half serve one.
		if in.Writable {
			bad = append(bad, fmt.Sprintf("input %s is writable, which this backend does not serve (it claims no writable inputs)", in.Target))
		}
	}
	if s.Egress != nil {
		// The container's network is none: a proxy the receipt would name
		// would never be reachable.
		bad = append(bad, "restricted egress is not served by this backend (it claims no restricted egress); ask for network: deny and no credentials")
	}
	if st, err := os.Stat(s.Rootfs); err != nil || !st.IsDir() {
		bad = append(bad, fmt.Sprintf("Rootfs %q is not a directory", s.Rootfs))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s; fix the launch profile (every budget is required, admission sets them)", ErrPhaseSpec, strings.Join(bad, "; "))
	}
	return nil
}

// checkInputs refuses an input that is, or resolves to, a socket, or a
// directory that holds the engine's socket: whoever holds the engine's
// socket is root on its host (P3), and no phase input grants that.
func (b *PhaseBackend) checkInputs(ins []backend.Mount) error {
	sock, _ := unixPath(b.d.host)
	if sock != "" {
		if real, err := filepath.EvalSymlinks(sock); err == nil {
			sock = real
		}
	}
	for _, in := range ins {
		real, err := filepath.EvalSymlinks(in.Source)
		if err != nil {
			return fmt.Errorf("%w: input %s: %w; fix the input's source", ErrPhaseSpec, in.Source, err)
		}
		st, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("%w: input %s: %w", ErrPhaseSpec, in.Source, err)
		}
		if st.Mode()&os.ModeSocket != 0 {
			return fmt.Errorf("%w: input %s resolves to the socket %s; a socket is never bound into a phase (the engine's is host-root-equivalent)", ErrPhaseSpec, in.Source, real)
		}
		if sock != "" && (real == sock || strings.HasPrefix(sock, strings.TrimSuffix(real, "/")+"/")) {
			return fmt.Errorf("%w: input %s (%s) holds the engine's socket %s, which is host-root-equivalent; bind a directory that does not contain it", ErrPhaseSpec, in.Source, real, sock)
		}
	}
	return nil
}

// phaseSandbox is one prepared launch.
type phaseSandbox struct {
	b     *PhaseBackend
	id    string
	ws    *Workspace
	rec   backend.Recorder
	recs  phaseRecords
	spec  backend.Spec
	image string // the image ID the container runs
	host  string // hex SHA-256 of the HostConfig read back from the engine
	life  *partial.Lifecycle[phaseState, phaseOp]
}

// phaseState is where a phase sandbox is in its life; a phaseOp moves it,
// only as phaseMoves allows (partial.Lifecycle), as oci's containers and
// vm's machines are moved.
type phaseState uint8

const (
	phasePrepared phaseState = iota // made by Prepare (its container's record says whether it exists)
	phaseRunning                    // Run began: a sandbox runs once
)

type phaseOp uint8

const opRun phaseOp = iota // Run starts the container

// phaseMoves is every allowed move: one Run, from a prepared sandbox.
// Cleanup is allowed in every state and moves nothing (it is idempotent
// and re-confirms from the records).
var phaseMoves = map[phaseState]map[phaseOp]phaseState{
	phasePrepared: {opRun: phaseRunning},
}

// phaseRecords are a launch's records, from this process or the journal.
type phaseRecords struct {
	dir, out, image, ctr *backend.Resource
}

// Prepare makes the launch dir and its bounded output, tags the cached
// rootfs image for the launch (importing it on first use), and creates
// the container, recording each before and after it is made.
func (b *PhaseBackend) Prepare(ctx context.Context, id string, s backend.Spec, rec backend.Recorder) (backend.Sandbox, error) {
	intents, err := b.Intents(id)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, errors.New("docker phase prepare: a recorder is required: nothing is created unrecorded")
	}
	if err := checkSpec(s); err != nil {
		return nil, err
	}
	if err := b.checkInputs(s.Inputs); err != nil {
		return nil, err
	}
	ws, err := b.d.Workspace(Owner{Workspace: b.workspace(id), Attempt: id}, rec)
	if err != nil {
		return nil, err
	}
	sb := &phaseSandbox{b: b, id: id, ws: ws, rec: rec, spec: s, life: partial.NewLifecycle(phasePrepared, phaseMoves)}
	if err := sb.prepare(ctx, intents); err != nil {
		return sb, fmt.Errorf("docker phase prepare %s: %w", id, err)
	}
	return sb, nil
}

func (sb *phaseSandbox) prepare(ctx context.Context, intents []backend.Resource) error {
	dirR, outR, imgR := intents[0], intents[1], intents[2]
	if err := sb.rec.Intent(dirR, outR, imgR); err != nil {
		return fmt.Errorf("record intents: %w", err)
	}
	if err := os.Mkdir(dirR.Name, 0o700); err != nil {
		return fmt.Errorf("launch dir: %w", err)
	}
	if err := sb.created(&sb.recs.dir, dirR, outputfs.PathIdentity); err != nil {
		return err
	}
	if err := os.Mkdir(outR.Name, 0o700); err != nil {
		return fmt.Errorf("output dir: %w", err)
	}
	// The output belongs to the workload's user, as oci's does.
	owner := &outputfs.Owner{UID: int(sb.spec.UID), GID: int(sb.spec.GID)}
	if err := outputfs.Mount(outR.Name, sb.spec.OutputBytes, sb.spec.OutputFiles, owner); err != nil {
		return err
	}
	if err := sb.created(&sb.recs.out, outR, outputfs.MountIdentity); err != nil {
		return err
	}
	imageID, err := sb.b.tagImage(ctx, sb.spec.Rootfs, imgR.Name)
	if err != nil {
		return err
	}
	sb.image = imageID
	imgR.Identity = map[string]string{IdentityID: imageID}
	imgR.State = "created"
	if err := sb.rec.Created(imgR); err != nil {
		return fmt.Errorf("record image tag %s: %w", imgR.Name, err)
	}
	sb.recs.image = &imgR
	cfg, host := sb.containerConfig(imgR.Name + ":latest")
	cr, err := sb.ws.CreateContainer(ctx, phaseContainer, cfg, host, nil)
	if cr.Identity != nil {
		sb.recs.ctr = &cr
	}
	if err != nil {
		return err
	}
	// The evidence is what the engine holds, not what was sent.
	ins, err := sb.ws.Inspect(ctx, cr)
	if err != nil {
		return fmt.Errorf("read back container %s: %w", cr.Name, err)
	}
	if ins.Image != imageID {
		return fmt.Errorf("container %s runs image %s, the launch tagged %s", cr.Name, ins.Image, imageID)
	}
	hc, err := json.Marshal(ins.HostConfig)
	if err != nil {
		return fmt.Errorf("hostconfig: %w", err)
	}
	sum := sha256.Sum256(hc)
	sb.host = hex.EncodeToString(sum[:])
	return nil
}

func (sb *phaseSandbox) created(into **backend.Resource, r backend.Resource, ident func(string) (map[string]string, error)) error {
	id, err := ident(r.Name)
	if err != nil {
		return fmt.Errorf("identify %s %s: %w", r.Kind, r.Name, err)
	}
	r.Identity, r.State = id, "created"
	*into = &r
	if err := sb.rec.Created(r); err != nil {
		return fmt.Errorf("record %s %s: %w", r.Kind, r.Name, err)
	}
	return nil
}

// containerConfig is the reviewed profile as the engine takes it.
func (sb *phaseSandbox) containerConfig(ref string) (*container.Config, *container.HostConfig) {
	s := sb.spec
	cfg := &container.Config{
		Image: ref, Cmd: s.Args, Entrypoint: []string{}, Env: s.Env, WorkingDir: s.Cwd, Hostname: s.Hostname,
		AttachStdout: true, AttachStderr: true, NetworkDisabled: true,
		// The Spec's ids, never the image's default user.
		User: fmt.Sprintf("%d:%d", s.UID, s.GID),
	}
	mounts := []mount.Mount{{Type: mount.TypeBind, Source: sb.recs.out.Name, Target: s.OutputPath,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}}
	for _, in := range s.Inputs {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: in.Source, Target: in.Target, ReadOnly: true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	pids := s.Pids
	host := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges=true"},
		IpcMode:        "private",
		Mounts:         mounts,
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", s.TmpBytes)},
		// No log files on the engine's disk: the streams are attached.
		LogConfig:     container.LogConfig{Type: "none"},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Resources: container.Resources{
			Memory: s.Memory, MemorySwap: s.Memory, PidsLimit: &pids, NanoCPUs: int64(s.CPU * 1e9),
			Ulimits: []*container.Ulimit{{Name: "fsize", Soft: s.FileSize, Hard: s.FileSize}},
		},
	}
	return cfg, host
}

// rootfsKey is the cache key of a rootfs tree: the digest its directory
// (or the directory above a "rootfs" leaf) is named by, as the image store
// lays trees out; a tree named otherwise is keyed by the digest of its tar.
func rootfsKey(dir string) (string, error) {
	for _, name := range []string{filepath.Base(dir), filepath.Base(filepath.Dir(dir))} {
		name = strings.TrimPrefix(strings.TrimPrefix(name, "sha256-"), "sha256:")
		if len(name) == 64 && strings.Trim(name, "0123456789abcdef") == "" {
			return name, nil
		}
	}
	rc, err := tarRootfs(dir)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", fmt.Errorf("digest rootfs %s: %w", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func tarRootfs(dir string) (io.ReadCloser, error) {
	rc, err := archive.TarWithOptions(dir, &archive.TarOptions{Compression: compression.None})
	if err != nil {
		return nil, fmt.Errorf("tar rootfs %s: %w", dir, err)
	}
	return rc, nil
}

// tagImage finds the cached image of rootfs (in the backend's index) or
// imports it, and tags it as ref for this launch; it returns the image ID.
// The cached image stays after the launch, deliberately: it is the cache,
// labelled for an operator to prune.
func (b *PhaseBackend) tagImage(ctx context.Context, rootfs, ref string) (string, error) {
	key, err := rootfsKey(rootfs)
	if err != nil {
		return "", err
	}
	b.importMu.Lock()
	defer b.importMu.Unlock()
	id, err := b.cachedImage(ctx, key)
	if err != nil {
		return "", err
	}
	if id == "" {
		if id, err = b.importImage(ctx, rootfs, key); err != nil {
			return "", err
		}
		if err := b.remember(key, id); err != nil {
			return "", err
		}
	}
	if _, err := b.d.cli.ImageInspect(ctx, ref+":latest"); err == nil {
		return "", fmt.Errorf("image tag %s exists already: %w; it is left alone", ref, ErrNameTaken)
	}
	if err := b.d.cli.ImageTag(ctx, id, ref+":latest"); err != nil {
		return "", fmt.Errorf("tag image %s as %s: %w", id, ref, err)
	}
	// The tag must name what was tagged: another tag call could race.
	got, err := b.d.cli.ImageInspect(ctx, ref+":latest")
	if err != nil {
		return "", fmt.Errorf("read back image tag %s: %w", ref, err)
	}
	if got.ID != id {
		return "", fmt.Errorf("image tag %s names %s, the launch tagged %s: %w", ref, got.ID, id, ErrNotOwned)
	}
	return id, nil
}

// cachedImage is the image this backend imported for key, from its own
// root-only index: never found by label, since anyone who can reach the
// engine can label an image. An image ID is the digest of the image's
// config, which names its layer's digest, so an image with the recorded
// ID holds what was imported.
func (b *PhaseBackend) cachedImage(ctx context.Context, key string) (string, error) {
	data, err := os.ReadFile(b.cacheEntry(key))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	id := strings.TrimSpace(string(data))
	img, err := b.d.cli.ImageInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return "", nil // pruned: import again
	}
	if err != nil {
		return "", fmt.Errorf("inspect cached image %s: %w", id, err)
	}
	if img.ID != id {
		return "", nil
	}
	// The image must still hold its cache tag: an image tagged only by
	// launches is deleted by the last launch's untag.
	if !slices.Contains(img.RepoTags, "custody-rootfs:"+key[:12]) {
		return "", nil
	}
	return id, nil
}

func (b *PhaseBackend) cacheEntry(key string) string {
	return filepath.Join(b.opts.StateDir, "images", key)
}

// remember records the imported image of key in the index.
func (b *PhaseBackend) remember(key, id string) error {
	dir := filepath.Dir(b.cacheEntry(key))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".new-")
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("image cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), b.cacheEntry(key)); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	return nil
}

// importImage imports the rootfs tree as an image labelled with its key,
// under the cache tag custody-rootfs:<key[:12]>.
func (b *PhaseBackend) importImage(ctx context.Context, rootfs, key string) (string, error) {
	rc, err := tarRootfs(rootfs)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	ref := "custody-rootfs:" + key[:12]
	out, err := b.d.cli.ImageImport(ctx, image.ImportSource{Source: rc, SourceName: "-"}, ref,
		image.ImportOptions{Changes: []string{"LABEL " + LabelRootfs + "=" + key}})
	if err != nil {
		return "", fmt.Errorf("import rootfs %s: %w", rootfs, err)
	}
	_, err = io.Copy(io.Discard, out)
	out.Close()
	if err != nil {
		return "", fmt.Errorf("import rootfs %s: %w", rootfs, err)
	}
	img, err := b.d.cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("inspect imported %s: %w", ref, err)
	}
	if img.Config == nil || img.Config.Labels[LabelRootfs] != key {
		return "", fmt.Errorf("imported %s (%s) does not carry %s=%s", ref, img.ID, LabelRootfs, key)
	}
	return img.ID, nil
}

// Output is the bounded output filesystem on the host, valid until Cleanup.
func (sb *phaseSandbox) Output() backend.Output { return phaseOutput{sb.b.launchDir(sb.id)} }

type phaseOutput struct{ dir string }

func (o phaseOutput) Dir() string          { return filepath.Join(o.dir, "out") }
func (o phaseOutput) Used() (int64, error) { return outputfs.Used(o.Dir()) }

// Evidence is the digest of the HostConfig read back from the engine and
// the image ID the container runs.
func (sb *phaseSandbox) Evidence() map[string]string {
	ev := map[string]string{}
	if sb.host != "" {
		ev["hostconfig"] = sb.host
	}
	if id, ok := strings.CutPrefix(sb.image, "sha256:"); ok {
		ev["image"] = id
	}
	return ev
}

// Foreign lists containers, networks and volumes that carry custody's
// labels or names, image tags and launch dirs of this backend, that known
// (the journal) does not hold. They are reported, never touched.
func (b *PhaseBackend) Foreign(known func(kind, name string) bool) []backend.Resource {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []backend.Resource
	rs, err := b.d.Foreign(ctx, func(string, string) bool { return false })
	if err != nil {
		out = append(out, backend.Resource{Kind: "docker-engine", Name: b.d.host, State: "unknown",
			Identity: map[string]string{"error": err.Error()}})
	}
	for _, r := range rs {
		if !known(r.Kind, r.Name) {
			out = append(out, r)
		}
	}
	if imgs, err := b.d.cli.ImageList(ctx, image.ListOptions{}); err == nil {
		for _, img := range imgs {
			for _, tag := range img.RepoTags {
				name, ok := strings.CutSuffix(tag, ":latest")
				if ok && launchTagRe.MatchString(name) && !known(KindPhaseImage, name) {
					out = append(out, backend.Resource{Kind: KindPhaseImage, Name: name, State: "foreign", Identity: map[string]string{IdentityID: img.ID}})
				}
			}
		}
	}
	dir := filepath.Join(b.opts.StateDir, "launches")
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if p := filepath.Join(dir, e.Name()); !known(KindPhaseDir, p) {
				out = append(out, backend.Resource{Kind: KindPhaseDir, Name: p, State: "foreign"})
			}
		}
	}
	return out
}

// isMounted says whether something is mounted exactly at p.
func isMounted(p string) bool {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
	return err == nil && len(ms) > 0
}

// unmountOwned unmounts p only when the mount there is the recorded one.
func unmountOwned(r backend.Resource) (string, error) {
	got, err := outputfs.MountIdentity(r.Name)
	if err != nil {
		if isMounted(r.Name) {
			return "", fmt.Errorf("mount at %s cannot be identified: %w; not unmounting it", r.Name, err)
		}
		return "not mounted", nil
	}
	if r.Identity["mountId"] == "" || got["mountId"] != r.Identity["mountId"] {
		return "", fmt.Errorf("mount at %s is id %s, the journal recorded %q: %w; not unmounting it", r.Name, got["mountId"], r.Identity["mountId"], ErrNotOwned)
	}
	if err := unix.Unmount(r.Name, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return "", fmt.Errorf("unmount %s: %w", r.Name, err)
	}
	if again, err := outputfs.MountIdentity(r.Name); err == nil && again["mountId"] == r.Identity["mountId"] {
		return "", fmt.Errorf("%s: still mounted", r.Name)
	}
	return "unmounted", nil
}

// removeDirOwned removes the launch dir only when it is the recorded one
// and nothing is mounted under it.
func removeDirOwned(r backend.Resource) (string, error) {
	got, err := outputfs.PathIdentity(r.Name)
	if errors.Is(err, os.ErrNotExist) {
		return "already gone", nil
	}
	if err != nil {
		return "", err
	}
	if r.Identity["ino"] == "" || got["dev"] != r.Identity["dev"] || got["ino"] != r.Identity["ino"] {
		return "", fmt.Errorf("%s is dev %s ino %s, the journal recorded dev %q ino %q: %w; left alone",
			r.Name, got["dev"], got["ino"], r.Identity["dev"], r.Identity["ino"], ErrNotOwned)
	}
	left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(r.Name))
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	if len(left) > 0 {
		return "", fmt.Errorf("launch dir %s still has %d mounts under it; not removed", r.Name, len(left))
	}
	if err := os.RemoveAll(r.Name); err != nil {
		return "", fmt.Errorf("remove launch dir: %w", err)
	}
	if _, err := os.Lstat(r.Name); !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s still exists", r.Name)
	}
	return "removed", nil
}

// untagOwned removes the launch's image tag once it names the recorded
// image; the cached image itself is kept (it has its cache tag). The
// engine removes a tag by reference only, so the check and the untag are
// two calls: a tag moved in between by another engine client would be
// untagged too, which removes no image that anything else tags.
func (b *PhaseBackend) untagOwned(ctx context.Context, r backend.Resource) (string, error) {
	ref := r.Name + ":latest"
	img, err := b.d.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return "already gone", nil
	}
	if err != nil {
		return "", fmt.Errorf("inspect image tag %s: %w", ref, err)
	}
	if want := r.Identity[IdentityID]; want == "" || img.ID != want {
		return "", fmt.Errorf("image tag %s names %s, the journal recorded %q: %w; left alone", ref, img.ID, want, ErrNotOwned)
	}
	if img.Config == nil || img.Config.Labels[LabelRootfs] == "" {
		return "", fmt.Errorf("image %s carries no %s label: %w; left alone", img.ID, LabelRootfs, ErrNotOwned)
	}
	if _, err := b.d.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: false}); err != nil && !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("untag %s: %w", ref, err)
	}
	if _, err := b.d.cli.ImageInspect(ctx, ref); err == nil {
		return "", fmt.Errorf("image tag %s: %w", ref, ErrStillThere)
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("confirm image tag %s gone: %w", ref, err)
	}
	return "untagged; the cached rootfs image " + img.ID + " is kept for later launches", nil
}
