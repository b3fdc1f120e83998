package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/daemontest"
)

const policyTmpl = `apiVersion: custody.dev/v1alpha1
kind: Policy
images: [{digest: "@IMAGE@"}]
actors: [{name: ci-bot, stages: [build], submitters: {uids: [0]}}]
ceilings: {memory: 512Mi, pids: 256, cpu: 2, wallTime: 10m, outputBytes: 64Mi, tmpBytes: 64Mi, inputBytes: 64Mi}
defaults: {cpu: 1, outputBytes: 8Mi, tmpBytes: 8Mi}
tiers: {development: true}
inputRoots: ["@INPUTROOT@"]
`

// daemon is the fault-injection custodyd on its temporary directories.
type daemon struct {
	*daemontest.Daemon
	t *testing.T
}

func setup(t *testing.T) *daemon {
	t.Helper()
	return &daemon{Daemon: daemontest.New(t, daemontest.Options{Fault: true, LogLevel: "info"}), t: t}
}

// start runs the fault-injection custodyd, dying at fault ("" = never).
func (d *daemon) start(fault string) {
	d.t.Helper()
	d.Start("CUSTODY_FAULT=" + fault)
}

func (d *daemon) stop() { d.Stop() }

func TestCrashAtEachStageRecovers(t *testing.T) {
	stages := []string{"after-consume", "after-snapshot", "mid-prepare", "after-create", "after-start", "mid-run", "after-exit", "mid-cleanup"}
	d := setup(t)
	defer d.stop()
	// Import the image and write the policy once, with a clean daemon.
	d.start("")
	ctx := context.Background()
	image := d.ImportBusybox(ctx)
	d.WritePolicy(policyTmpl)
	daemontest.Write(t, filepath.Join(d.Dir, "src", "in.txt"), "input\n")
	d.stop()

	for i, stage := range stages {
		t.Run(stage, func(t *testing.T) {
			marker := fmt.Sprint(30000 + i*7 + os.Getpid()%1000)
			d.start(stage)
			phase := fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: crash
stage: build
tier: development
image: %q
command: ["/bin/sh", "-c", "setsid sh -c 'sleep %s &'; echo out > /out/f; sleep 1"]
inputs: [{source: ./src, target: /in}]
output: {path: /out}
resources: {memory: 64Mi, pids: 64, wallTime: 30s}
`, image, marker)
			env, err := d.Control.IssueGrant(ctx, api.IssueRequest{Phase: api.PhaseSource{YAML: []byte(phase), BaseDir: d.Dir}, Actor: "ci-bot", TTL: "10m"})
			if err != nil {
				t.Fatalf("issue: %v\n%s", err, d.Logs.String())
			}
			res, err := d.Submit.Run(ctx, env, io.Discard, io.Discard, nil)
			if err == nil && res != nil && stage != "mid-cleanup" {
				t.Fatalf("run completed (%s) although custodyd should have died at %s", res.Status, stage)
			}
			ps := d.Exited(20 * time.Second)
			if ps == nil {
				t.Fatalf("custodyd did not die at %s\n%s", stage, d.Logs.String())
			}
			if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("custodyd exited with %v, want SIGKILL at %s\n%s", ps, stage, d.Logs.String())
			}

			// Restart: recovery runs before the daemon serves.
			d.start("")
			defer d.stop()
			attempts := d.attempts(t)
			if len(attempts) == 0 {
				t.Fatalf("no attempt recorded after a crash at %s", stage)
			}
			last := attempts[len(attempts)-1]
			if last.State != "clean" {
				t.Fatalf("attempt after a crash at %s is %v, want clean\n%s", stage, last, d.Logs.String())
			}
			d.noLeaks(t, marker)
			// The grant stays consumed: no automatic re-run, no replay.
			_, err = d.Submit.Run(ctx, env, io.Discard, io.Discard, nil)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != "replayed" {
				t.Fatalf("replaying the grant after recovery: %v, want replayed", err)
			}
			q, err := d.Control.Quarantine(ctx)
			if err != nil || q.Quarantined {
				t.Fatalf("quarantine after a clean recovery: %+v %v", q, err)
			}
			d.stop()
		})
	}
}

func (d *daemon) attempts(t *testing.T) []api.Attempt {
	t.Helper()
	out, err := d.Control.Attempts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// noLeaks asserts zero leaked processes, cgroups, mounts, directories and
// runc state.
func (d *daemon) noLeaks(t *testing.T, marker string) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), "sleep "+marker) {
			t.Errorf("leaked process %s: %q", e.Name(), b)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(d.Dir, "run")); len(left) > 0 {
		t.Errorf("leaked launch dirs: %v", left)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), filepath.Join(d.Dir, "run")) {
		t.Errorf("leaked mounts under %s", filepath.Join(d.Dir, "run"))
	}
	state, _ := os.ReadDir(filepath.Join(d.Dir, "state", "runc"))
	for _, e := range state {
		if e.IsDir() {
			t.Errorf("leaked runc state %s", e.Name())
		}
		if strings.HasSuffix(e.Name(), ".log") { // runc --log files of launches and recoveries
			t.Errorf("leaked runc log %s", e.Name())
		}
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/custody/custody-*")
	more, _ := filepath.Glob("/sys/fs/cgroup/memory/*/*/custody/custody-*")
	for _, c := range append(cg, more...) {
		// Other packages' tests may run containers concurrently; only this
		// daemon's runs are ours to judge, and they are in its journal.
		if d.journalled(filepath.Base(c)) {
			t.Errorf("leaked cgroup %s", c)
		}
	}
}

func (d *daemon) journalled(containerID string) bool {
	for _, a := range d.attempts(d.t) {
		if "custody-"+a.RunID == containerID {
			return true
		}
	}
	return false
}

// TestForeignStateUntouched plants things that look like custody's (our
// naming, our directories) but are in no journal: recovery must report
// them and do nothing to them.
func TestForeignStateUntouched(t *testing.T) {
	d := setup(t)
	defer d.stop()
	foreignID := fmt.Sprintf("custody-foreign%d", os.Getpid())
	launch := filepath.Join(d.Dir, "run", foreignID)
	daemontest.Write(t, filepath.Join(launch, "keep"), "not yours\n")
	cg := filepath.Join("/sys/fs/cgroup/pids/custody", foreignID)
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Rmdir(cg); os.RemoveAll(launch) })

	d.start("")
	rec, err := d.Control.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(rec.Foreign, "\n")
	for _, want := range []string{launch, cg} {
		if !strings.Contains(joined, want) {
			t.Errorf("foreign %s not reported: %v", want, rec.Foreign)
		}
	}
	if _, err := os.Stat(filepath.Join(launch, "keep")); err != nil {
		t.Errorf("foreign launch dir was touched: %v", err)
	}
	if _, err := os.Stat(cg); err != nil {
		t.Errorf("foreign cgroup was touched: %v", err)
	}
	if !strings.Contains(d.Logs.String(), "foreign state left untouched") {
		t.Errorf("no diagnostic logged:\n%s", d.Logs.String())
	}
}
