package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/platform"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
)

// probed is the shared daemon's profile: one probe per test binary.
var probed struct {
	sync.Once
	e   *backend.PackEngine
	err error
}

func phaseBackend(t *testing.T) (*PhaseBackend, string) {
	t.Helper()
	d, dt := open(t)
	probed.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		probed.e, probed.err = d.Probe(ctx, ProbeOptions{Image: dt.Image})
	})
	if probed.err != nil {
		t.Fatalf("probe: %v", probed.err)
	}
	b, err := NewPhase(context.Background(), PhaseOptions{Docker: d, Engine: probed.e, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return b, dt.Version
}

func phaseSpec(rootfs string, args ...string) backend.Spec {
	return backend.Spec{
		Rootfs: rootfs, Args: args, Env: []string{"PATH=/bin"}, Cwd: "/", Hostname: "phase",
		OutputPath: "/out", OutputBytes: 1 << 20, OutputFiles: 64, TmpBytes: 1 << 20,
		Memory: 64 << 20, Pids: 64, CPU: 1, FileSize: 1 << 20,
	}
}

// TestPhaseBackendContract runs the one suite of the backend contract
// against real containers on the isolated daemon.
func TestPhaseBackendContract(t *testing.T) {
	backendtest.Suite(t, func(t *testing.T) backendtest.Fixture {
		b, _ := phaseBackend(t)
		rootfs := rootfsFixture(t)
		return backendtest.Fixture{Backend: b, Spec: func(args ...string) backend.Spec { return phaseSpec(rootfs, args...) },
			// dockerd sets these in every container; neither is the
			// launcher's (HOSTNAME is the Spec's hostname).
			EnvAdded: map[string]string{"HOSTNAME": "phase", "HOME": "/root"},
			State:    func() string { return engineState(b.d) }}
	})
}

// engineState lists every container on the engine, with its state and
// labels: what a failing case left.
func engineState(d *Docker) string {
	cs, err := d.cli.ContainerList(context.Background(), container.ListOptions{All: true})
	if err != nil {
		return "  list containers: " + err.Error()
	}
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "  container %.12s %v %s %v\n", c.ID, c.Names, c.State, c.Labels)
	}
	return b.String()
}

// rootfsFixture is a busybox tree named by its digest, as the image store
// names trees, so launches of it share one cached image.
func rootfsFixture(t *testing.T) string {
	t.Helper()
	tree := testenv.BusyboxRootfs(t)
	key, err := rootfsKey(tree)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), key, "rootfs")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tree, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runPhase(t *testing.T, b *PhaseBackend, id string, s backend.Spec, out backend.IO, wall time.Duration) (backend.Sandbox, *backend.Exit) {
	t.Helper()
	ctx := context.Background()
	rec := newRecorder()
	sb, err := b.Prepare(ctx, id, s, rec)
	if err != nil {
		if sb != nil {
			sb.Cleanup(ctx)
		}
		t.Fatalf("prepare: %v", err)
	}
	ex, err := sb.Run(ctx, wall, out)
	if err != nil {
		sb.Cleanup(ctx)
		t.Fatalf("run: %v", err)
	}
	t.Cleanup(func() {
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup not verified: %+v", rep.Steps)
		}
	})
	return sb, ex
}

// TestPhaseProfileIsObservedLive: the container runs with the network
// off, a read-only rootfs, no capabilities, no-new-privileges, a seccomp
// filter and the Spec's limits, as read from its live process; the output
// mount takes writes up to its bound and refuses past it.
func TestPhaseProfileIsObservedLive(t *testing.T) {
	b, _ := phaseBackend(t)
	rootfs := rootfsFixture(t)
	script := `echo ok > /out/ok; if echo x > /rootfs-write 2>/dev/null; then echo ROOTFS-WRITABLE; fi
dd if=/dev/zero of=/out/big bs=1k count=2048 2>/dev/null && echo OUTPUT-UNBOUNDED
ip link 2>/dev/null | grep -q eth && echo HAS-ETH; sleep 2`
	var stdout bytes.Buffer
	sb, ex := runPhase(t, b, "phase-profile", phaseSpec(rootfs, "/bin/sh", "-c", script), backend.IO{Stdout: &stdout, Stderr: &stdout}, 30*time.Second)
	if ex.Code != 0 {
		t.Fatalf("exit %+v: %s", ex, stdout.String())
	}
	for _, bad := range []string{"ROOTFS-WRITABLE", "OUTPUT-UNBOUNDED", "HAS-ETH"} {
		if strings.Contains(stdout.String(), bad) {
			t.Errorf("%s: %s", bad, stdout.String())
		}
	}
	if data, err := os.ReadFile(filepath.Join(sb.Output().Dir(), "ok")); err != nil || string(data) != "ok\n" {
		t.Errorf("the legitimate output write: %q %v", data, err)
	}
	o := ex.Observation
	if o == nil {
		t.Fatal("no observation")
	}
	if o.Capabilities["CapEff"] != "0000000000000000" || o.Capabilities["CapBnd"] != "0000000000000000" {
		t.Errorf("capabilities %v, want none", o.Capabilities)
	}
	if !o.NoNewPrivs || o.Seccomp != "filter" {
		t.Errorf("no_new_privs %t seccomp %q", o.NoNewPrivs, o.Seccomp)
	}
	if strings.Join(o.Interfaces, ",") != "lo" {
		t.Errorf("interfaces %v, want only lo", o.Interfaces)
	}
	if o.Cgroup.MemoryLimitBytes != 64<<20 || o.Cgroup.PidsLimit != 64 {
		t.Errorf("cgroup limits %+v, want memory 64 MiB and 64 pids", o.Cgroup)
	}
	var rootRO, outRW bool
	for _, m := range o.Mounts {
		switch m.Target {
		case "/":
			rootRO = m.ReadOnly
		case "/out":
			outRW = !m.ReadOnly && m.FSType == "tmpfs"
		}
	}
	if !rootRO || !outRW {
		t.Errorf("mounts: / read-only %t, /out a writable tmpfs %t: %+v", rootRO, outRW, o.Mounts)
	}
	ev := sb.Evidence()
	if len(ev["hostconfig"]) != 64 || len(ev["image"]) != 64 {
		t.Errorf("evidence %v", ev)
	}
}

// blockedWriter never returns from Write until released.
type blockedWriter struct{ release chan struct{} }

func (w blockedWriter) Write(p []byte) (int, error) { <-w.release; return len(p), nil }

// TestPhaseSlowReaderDoesNotHoldTheWorkload: a writer that blocks does not
// stop the workload from writing 4 MiB and exiting well within its wall
// time; a normal reader gets the stream whole.
func TestPhaseSlowReaderDoesNotHoldTheWorkload(t *testing.T) {
	b, _ := phaseBackend(t)
	rootfs := rootfsFixture(t)
	w := blockedWriter{release: make(chan struct{})}
	defer close(w.release)
	start := time.Now()
	_, ex := runPhase(t, b, "phase-slow", phaseSpec(rootfs, "/bin/sh", "-c", "dd if=/dev/zero bs=1k count=4096 2>/dev/null; echo done >&2"),
		backend.IO{Stdout: w, Stderr: w}, 20*time.Second)
	if ex.TimedOut || ex.Code != 0 || time.Since(start) > 15*time.Second {
		t.Errorf("with a blocked reader: exit %+v after %v", ex, time.Since(start))
	}
	var out bytes.Buffer
	_, ex = runPhase(t, b, "phase-fast", phaseSpec(rootfs, "/bin/sh", "-c", "dd if=/dev/zero bs=1k count=512 2>/dev/null"),
		backend.IO{Stdout: &out}, 20*time.Second)
	if ex.Code != 0 || out.Len() != 512<<10 {
		t.Errorf("a normal reader got %d bytes, exit %+v", out.Len(), ex)
	}
}

// TestPhaseImageIsCachedAndKept: two launches of one rootfs share one
// imported image; each launch's tag is removed at cleanup and the cached
// image stays, deliberately.
func TestPhaseImageIsCachedAndKept(t *testing.T) {
	b, _ := phaseBackend(t)
	rootfs := rootfsFixture(t)
	ctx := context.Background()
	var images []string
	for _, id := range []string{"phase-cache-a", "phase-cache-b"} {
		sb, err := b.Prepare(ctx, id, phaseSpec(rootfs, "/bin/true"), newRecorder())
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, sb.Evidence()["image"])
		rep := sb.Cleanup(ctx)
		if !rep.Verified {
			t.Fatalf("cleanup: %+v", rep.Steps)
		}
		if _, err := b.d.cli.ImageInspect(ctx, NativeName(b.workspace(id), phaseImage)+":latest"); err == nil {
			t.Errorf("launch %s's image tag survived cleanup", id)
		}
	}
	if images[0] == "" || images[0] != images[1] {
		t.Errorf("images %v: want one cached image", images)
	}
	if _, err := b.d.cli.ImageInspect(ctx, "sha256:"+images[0]); err != nil {
		t.Errorf("the cached image is gone: %v", err)
	}
}

// TestPhaseCachedImageOutlivesLaunches: the image cache never hands a
// launch an image that only launches tag. When the cache tag has moved to
// another image (a second importer of the same tree), the next launch
// imports again rather than run the stray image, whose last untag would
// delete it from under the next lookup; launches at once share one import.
func TestPhaseCachedImageOutlivesLaunches(t *testing.T) {
	b, _ := phaseBackend(t)
	dt := dockertest.Shared(t)
	cli := dt.TestClient(t)
	rootfs := rootfsFixture(t)
	key, err := rootfsKey(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	launch := func(id string) string {
		sb, err := b.Prepare(ctx, id, phaseSpec(rootfs, "/bin/true"), newRecorder())
		if err != nil {
			t.Errorf("prepare %s: %v", id, err)
			return ""
		}
		img := sb.Evidence()["image"]
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup %s: %+v", id, rep.Steps)
		}
		return img
	}
	var wg sync.WaitGroup
	images := make([]string, 3)
	for i := range images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			images[i] = launch(fmt.Sprintf("phase-share-%d", i))
		}()
	}
	wg.Wait()
	if images[0] == "" || images[0] != images[1] || images[1] != images[2] {
		t.Fatalf("parallel launches ran images %v, want one shared import", images)
	}
	// Another importer moves the cache tag onto an image of its own.
	if err := cli.ImageTag(ctx, dt.Image, "custody-rootfs:"+key[:12]); err != nil {
		t.Fatal(err)
	}
	ran := launch("phase-share-after")
	if ran == images[0] {
		t.Errorf("the launch ran %s, which only launches tagged once the cache tag moved", ran)
	}
	if _, err := cli.ImageInspect(ctx, "sha256:"+ran); err != nil {
		t.Errorf("the image the launch ran is gone after its cleanup: %v", err)
	}
}

// TestPhaseCapabilitiesAreHonest: the development tier is claimed on the
// native isolated daemon, production never is; without a profile nothing
// is claimed. The identity names the dockerd that serves the socket.
func TestPhaseCapabilitiesAreHonest(t *testing.T) {
	b, version := phaseBackend(t)
	caps := b.Capabilities()
	if gaps, ok := caps.Tiers[platform.TierDevelopment]; !ok || len(gaps) != 0 {
		t.Errorf("development tier gaps %+v (known %t), want none on a native local daemon", gaps, ok)
	}
	if gaps := caps.Tiers[platform.TierProduction]; len(gaps) == 0 {
		t.Error("production tier claimed by the docker backend")
	}
	id := b.Identity()
	if id.Kind != "docker" || id.Version != version || filepath.Base(id.Path) != "dockerd" || len(id.SHA256) != 64 {
		t.Errorf("identity %+v", id)
	}
	bare, err := NewPhase(context.Background(), PhaseOptions{Docker: b.d, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if c := bare.Capabilities(); c.Tiers != nil || len(c.Controls) == 0 {
		t.Errorf("capabilities without a profile %+v, want no tier and a control gap", c)
	}
}

// TestPhaseLabelledLookAlikeImageIsNotUsed: an image someone else labelled
// with the rootfs's cache key is never run; the backend imports its own.
func TestPhaseLabelledLookAlikeImageIsNotUsed(t *testing.T) {
	b, _ := phaseBackend(t)
	dt := dockertest.Shared(t)
	rootfs := rootfsFixture(t)
	key, err := rootfsKey(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The look-alike: the daemon's busybox, committed with our label.
	cli := dt.TestClient(t)
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: dt.Image, Cmd: []string{"true"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	fake, err := cli.ContainerCommit(ctx, c.ID, container.CommitOptions{Reference: "lookalike:" + key[:12], Changes: []string{"LABEL " + LabelRootfs + "=" + key}})
	if err != nil {
		t.Fatal(err)
	}
	sb, ex := runPhase(t, b, "phase-lookalike", phaseSpec(rootfs, "/bin/true"), backend.IO{}, 20*time.Second)
	if ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	if got := "sha256:" + sb.Evidence()["image"]; got == fake.ID {
		t.Errorf("the launch ran the look-alike image %s", fake.ID)
	}
	if _, err := cli.ImageInspect(ctx, fake.ID); err != nil {
		t.Errorf("the look-alike image was touched: %v", err)
	}
}

// TestPhaseLimitsHold: within the memory limit a workload runs; past it
// the kernel kills it and the exit says OOMKilled. Inputs are readable
// and not writable.
func TestPhaseLimitsHold(t *testing.T) {
	b, _ := phaseBackend(t)
	rootfs := rootfsFixture(t)
	in := t.TempDir()
	if err := os.WriteFile(filepath.Join(in, "data"), []byte("input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := phaseSpec(rootfs, "/bin/sh", "-c", `cat /in/data; if (echo x > /in/data) 2>/dev/null; then echo INPUT-WRITABLE; fi; dd if=/dev/zero of=/dev/null bs=8M count=1 2>/dev/null && echo small-ok`)
	s.Inputs = []backend.Mount{{Source: in, Target: "/in"}}
	var out bytes.Buffer
	_, ex := runPhase(t, b, "phase-limits-ok", s, backend.IO{Stdout: &out, Stderr: &out}, 20*time.Second)
	if ex.Code != 0 || ex.OOMKilled || out.String() != "input\nsmall-ok\n" {
		t.Errorf("legitimate run: exit %+v, output %q", ex, out.String())
	}
	_, ex = runPhase(t, b, "phase-limits-oom", phaseSpec(rootfs, "/bin/sh", "-c", "dd if=/dev/zero of=/dev/null bs=256M count=1"), backend.IO{}, 20*time.Second)
	if !ex.OOMKilled || ex.Code == 0 {
		t.Errorf("a workload past its memory limit: exit %+v, want OOMKilled", ex)
	}
}

// failingCreated records like recorder but fails the Created record of
// one kind: the process "dies" between a create and its record.
type failingCreated struct {
	*recorder
	kind string
}

func (f failingCreated) Created(rs ...backend.Resource) error {
	for _, r := range rs {
		if r.Kind == f.kind {
			return errors.New("journal write failed")
		}
	}
	return f.recorder.Created(rs...)
}

func (r *recorder) records() []backend.Resource {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []backend.Resource
	for _, x := range r.last {
		if x.State == "intent" || x.State == "created" || x.State == "removed" {
			out = append(out, x)
		}
	}
	return out
}

// TestPhaseRecoversACreateWhoseRecordWasLost: the container and the image
// tag were made but their records were not written; recovery from the
// journal alone finds them (the container by its intent nonce, the tag
// through the backend's image index), removes them and verifies.
func TestPhaseRecoversACreateWhoseRecordWasLost(t *testing.T) {
	b, _ := phaseBackend(t)
	rootfs := rootfsFixture(t)
	ctx := context.Background()
	for _, kind := range []string{KindContainer, KindPhaseImage} {
		t.Run(kind, func(t *testing.T) {
			id := "phase-lost-" + strings.TrimPrefix(kind, "docker-")
			rec := failingCreated{newRecorder(), kind}
			intents, err := b.Intents(id)
			if err != nil {
				t.Fatal(err)
			}
			rec.Intent(intents...)
			sb, err := b.Prepare(ctx, id, phaseSpec(rootfs, "/bin/true"), rec)
			if err == nil {
				sb.Cleanup(ctx)
				t.Fatal("prepare succeeded though a record failed")
			}
			ws := b.workspace(id)
			name := NativeName(ws, phaseContainer)
			if kind == KindPhaseImage {
				name = NativeName(ws, phaseImage) + ":latest"
			}
			if kind == KindContainer {
				if _, err := b.d.inspect(ctx, KindContainer, name); err != nil {
					t.Fatalf("the unrecorded container is not there to recover: %v", err)
				}
			} else if _, err := b.d.cli.ImageInspect(ctx, name); err != nil {
				t.Fatalf("the unrecorded image tag is not there to recover: %v", err)
			}
			rep := b.Recover(ctx, id, rec.records(), rec.recorder)
			if !rep.Verified {
				t.Fatalf("recovery: %+v", rep.Steps)
			}
			if _, err := b.d.cli.ImageInspect(ctx, NativeName(ws, phaseImage)+":latest"); err == nil {
				t.Error("the image tag survived recovery")
			}
			if abs := b.VerifyAbsent(id, rec.records()); !abs.Verified {
				t.Errorf("absence after recovery: %+v", abs.Steps)
			}
		})
	}
}

// TestPhaseRecoveryLeavesALookAlikeTag: a tag with the launch's name on an
// image the backend never imported is reported, not removed, and the
// recovery does not claim it verified.
func TestPhaseRecoveryLeavesALookAlikeTag(t *testing.T) {
	b, _ := phaseBackend(t)
	dt := dockertest.Shared(t)
	ctx := context.Background()
	id := "phase-tag-lookalike"
	intents, err := b.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	ref := NativeName(b.workspace(id), phaseImage) + ":latest"
	cli := dt.TestClient(t)
	if err := cli.ImageTag(ctx, dt.Image, ref); err != nil {
		t.Fatal(err)
	}
	defer cli.ImageRemove(ctx, ref, image.RemoveOptions{})
	if rep := b.Recover(ctx, id, intents, newRecorder()); rep.Verified {
		t.Errorf("recovery verified with a look-alike tag in place: %+v", rep.Steps)
	}
	if img, err := cli.ImageInspect(ctx, ref); err != nil || img.ID != dt.Image {
		t.Errorf("the look-alike tag was touched: %v", err)
	}
	// Without the look-alike the same records recover to verified.
	if _, err := cli.ImageRemove(ctx, ref, image.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if rep := b.Recover(ctx, id, intents, newRecorder()); !rep.Verified {
		t.Errorf("recovery of nothing made: %+v", rep.Steps)
	}
}

// TestPhaseEngineSocketIsNeverAnInput: an input that is a symlink to the
// engine's socket, or a directory holding it, is refused before anything
// is made; a plain directory beside it is bound (TestPhaseLimitsHold).
func TestPhaseEngineSocketIsNeverAnInput(t *testing.T) {
	b, _ := phaseBackend(t)
	dt := dockertest.Shared(t)
	rootfs := rootfsFixture(t)
	sock, _ := unixPath(dt.Host)
	link := filepath.Join(t.TempDir(), "innocent")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(t.TempDir(), "dir")
	if err := os.Symlink(filepath.Dir(sock), dirLink); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{link, dirLink, filepath.Dir(sock)} {
		id := "phase-sock-" + randid.New(4)
		s := phaseSpec(rootfs, "/bin/true")
		s.Inputs = []backend.Mount{{Source: src, Target: "/in"}}
		intents, _ := b.Intents(id)
		sb, err := b.Prepare(context.Background(), id, s, newRecorder())
		if !errors.Is(err, ErrPhaseSpec) || sb != nil {
			if sb != nil {
				sb.Cleanup(context.Background())
			}
			t.Errorf("input %s: %v, want a refusal", src, err)
			continue
		}
		if rep := b.VerifyAbsent(id, intents); !rep.Verified {
			t.Errorf("after the refusal of %s: %+v", src, rep.Steps)
		}
	}
}
