package daemon

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/host"
)

// TestMountinfoNamesNoRunnerPath reads the workload's own mountinfo in a
// real run with an input: it names none of the runner's paths — not the
// keys, the store, the sockets, the image store or the runtime dir with
// the launch's bundle. The state dir itself is named once, as the input's
// root (the snapshot's path in its filesystem, which a bind mount shows;
// see baseMounts in backend/oci).
func TestMountinfoNamesNoRunnerPath(t *testing.T) {
	d := startDaemon(t)
	res, out, err := d.run(d.issue("cat /proc/self/mountinfo; echo mountinfo-done"))
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out, "mountinfo-done") {
		t.Fatalf("run: %v %+v\n%s", err, res, out)
	}
	if !strings.Contains(out, " /in ") {
		t.Fatalf("no input mount in the workload's mountinfo:\n%s", out)
	}
	state := d.cfg.Runner.StateDir
	for _, p := range []string{
		filepath.Join(state, "keys"), host.StorePath(runnerConfig(d.cfg.Runner)), filepath.Dir(d.cfg.ControlSocket),
		filepath.Join(state, "images"), filepath.Join(state, "runc"), d.cfg.Runner.RuntimeDir,
	} {
		if strings.Contains(out, p) {
			t.Errorf("the workload's mountinfo names %s:\n%s", p, out)
		}
	}
}
