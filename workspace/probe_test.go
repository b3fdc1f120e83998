package workspace_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/docker"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/workspace"
)

// probeObjects are the IDs of the containers (running ones apart) and
// networks that carry the probe label value nonce.
func probeObjects(ctx context.Context, t *testing.T, cli *client.Client, nonce string) (running, stopped, nets []string) {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", docker.LabelProbe+"="+nonce))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	must(t, err)
	for _, c := range cs {
		if c.State == "running" {
			running = append(running, c.ID)
		} else {
			stopped = append(stopped, c.ID)
		}
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	must(t, err)
	for _, n := range ns {
		nets = append(nets, n.ID)
	}
	return running, stopped, nets
}

// probeCrash is the crash child's mode that probes the engine and is
// killed by the parent mid-probe.
const probeCrash = "engine-probe"

// custodyd SIGKILLed while its engine probe runs (its prober just created,
// the two listeners running on the probe's two networks) leaves a journal
// record of every probe object: status lists the interrupted probe,
// recover removes what its records own by verified native ID, and leaves
// a foreign container and network that carry the same probe label.
func TestProbeKilledMidwayRecovers(t *testing.T) {
	dt := dockertest.Shared(t)
	ctx := testCtx(t)
	e0 := dt.TestClient(t)
	state := t.TempDir()
	must(t, os.WriteFile(filepath.Join(state, "subnet-pool"), []byte("10.140.0.0/16\n"), 0o600))
	// The child makes its own store, keys and policy in state, and
	// probes; it is SIGKILLed as soon as the engine reports the probe's
	// prober created, while the two listeners run.
	evs, errs := e0.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("event", string(events.ActionCreate)),
		filters.Arg("label", docker.LabelProbe))})
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+probeCrash, crashStateEnv+"="+state, crashHostEnv+"="+dt.Host)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
wait:
	for {
		select {
		case ev := <-evs:
			if strings.HasSuffix(ev.Actor.Attributes["name"], "-prober") {
				must(t, cmd.Process.Signal(syscall.SIGKILL))
				break wait
			}
		case err := <-errs:
			_ = cmd.Process.Kill()
			t.Fatalf("engine events: %v", err)
		}
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL mid-probe: %v\n%s", err, out.String())
	}

	e := setup(t, state, nil)
	reps, err := e.m.List(ctx)
	must(t, err)
	var probe *workspace.Report
	for i := range reps {
		if strings.HasPrefix(reps[i].ID, backend.ProbeAttemptPrefix) {
			probe = &reps[i]
		}
	}
	if probe == nil {
		t.Fatalf("the list does not report the interrupted probe: %+v", reps)
	}
	if probe.State != workspace.StateCleanupPending || probe.Retry == "" || len(probe.Resources) != 5 {
		t.Errorf("the interrupted probe's report: %+v", probe)
	}
	nonce := strings.TrimPrefix(probe.ID, backend.ProbeAttemptPrefix)
	running, stopped, nets := probeObjects(ctx, t, e.cli, nonce)
	if len(running) < 2 || len(running)+len(stopped) != 3 || len(nets) != 2 {
		t.Fatalf("the killed probe left %d running and %d other containers and %d networks, want 2 or 3 running of 3, and 2", len(running), len(stopped), len(nets))
	}

	// Foreign: anyone holding the engine's socket can set the probe's
	// label; recovery must not take that for ownership.
	labels := map[string]string{docker.LabelProbe: nonce, docker.LabelIntent: "foreign"}
	fc, err := e.cli.ContainerCreate(ctx, &container.Config{Image: dt.Image, Cmd: []string{"sleep", "60"}, Labels: labels},
		nil, nil, nil, "")
	must(t, err)
	t.Cleanup(func() { _ = e.cli.ContainerRemove(context.Background(), fc.ID, container.RemoveOptions{Force: true}) })
	must(t, e.cli.ContainerStart(ctx, fc.ID, container.StartOptions{}))
	fn, err := e.cli.NetworkCreate(ctx, "probe-lookalike-"+nonce, network.CreateOptions{Labels: labels})
	must(t, err)
	t.Cleanup(func() { _ = e.cli.NetworkRemove(context.Background(), fn.ID) })

	rec, err := e.m.Recover(ctx)
	must(t, err)
	var got *workspace.Report
	for i := range rec {
		if rec[i].ID == probe.ID {
			got = &rec[i]
		}
	}
	if got == nil || got.State != workspace.StateClean {
		t.Fatalf("recover of the interrupted probe: %+v", rec)
	}
	for _, r := range got.Resources {
		if r.State != "removed" {
			t.Errorf("after recover, probe object %s %s is %s", r.Kind, r.Name, r.State)
		}
	}
	running, stopped, nets = probeObjects(ctx, t, e.cli, nonce)
	if len(running) != 1 || running[0] != fc.ID || len(stopped) != 0 || len(nets) != 1 || nets[0] != fn.ID {
		t.Errorf("after recover: running %v, stopped %v, networks %v; want only the foreign container %s and network %s", running, stopped, nets, fc.ID, fn.ID)
	}
	// The foreign objects are reported as such, never touched.
	st, err := e.m.List(ctx)
	must(t, err)
	for _, r := range st {
		if strings.HasPrefix(r.ID, backend.ProbeAttemptPrefix) {
			t.Errorf("a recovered probe is still listed: %+v", r)
		}
	}
	if again, err := e.m.Recover(ctx); err != nil || len(again) != 0 {
		t.Errorf("a second recover acted: %+v %v", again, err)
	}
}

// probeCreates counts the engine's probe container creates between since
// and until.
func probeCreates(ctx context.Context, t *testing.T, cli *client.Client, since, until time.Time) int {
	t.Helper()
	evs, errs := cli.Events(ctx, events.ListOptions{Since: since.Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("event", string(events.ActionCreate)),
		filters.Arg("label", docker.LabelProbe))})
	n := 0
	for {
		select {
		case <-evs:
			n++
		case err := <-errs:
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("engine events: %v", err)
			}
			return n
		}
	}
}

// A client's dry run never probes the engine: before any probe it is
// refused, saying the engine is not yet proved and what proves it, and
// the engine saw no probe container. The operator's dry run probes; the
// client's dry run is then judged on the kept profile, again without a
// probe.
func TestClientDryRunNeverProbes(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	t0 := time.Now()
	_, err := e.m.AdmitFor(ctx, []byte(rangePack), e.dir, actor, root)
	var re *admission.RefusedError
	if !errors.As(err, &re) || len(re.Checks) != 1 || re.Checks[0].Code != "engine-unproved" ||
		!strings.Contains(re.Checks[0].Detail, "engine not yet proved") || !strings.Contains(re.Checks[0].Fix, "custody pack admit --operator") {
		t.Fatalf("a client's dry run before any probe: %v, want one engine-unproved refusal with its fix", err)
	}
	t1 := time.Now()
	if n := probeCreates(ctx, t, e.cli, t0, t1); n != 0 {
		t.Errorf("the client's dry run created %d probe container(s)", n)
	}
	if _, err := e.m.Admit(ctx, []byte(rangePack), e.dir, actor); err != nil {
		t.Fatalf("the operator's dry run: %v", err)
	}
	t2 := time.Now()
	if n := probeCreates(ctx, t, e.cli, t1, t2); n == 0 {
		t.Error("the operator's dry run did not probe the engine")
	}
	plan, err := e.m.AdmitFor(ctx, []byte(rangePack), e.dir, actor, root)
	if err != nil || len(plan.Services) != 5 {
		t.Fatalf("a client's dry run after the operator's: %v", err)
	}
	if n := probeCreates(ctx, t, e.cli, t2, time.Now()); n != 0 {
		t.Errorf("the client's dry run after the proof created %d probe container(s)", n)
	}
}
