package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/dockertest"
)

// custodyd dies (SIGKILL, the fault-injection build) while its engine
// probe runs, its prober just created and the two listeners running on
// the probe's two networks. The restarted custodyd lists the interrupted
// probe, and recover removes every object it made.
func TestPackProbeKilledRecovers(t *testing.T) {
	e := startPackEnvWith(t, func(string) string { return fmt.Sprintf(packPolicy, dockertest.ImageRef) }, "probe-created:container:prober")
	ctx := context.Background()
	compose := e.write("range/range.compose.yaml", fmt.Sprintf(rangePack, dockertest.ImageRef))
	// The operator's dry run is the first request that probes the engine.
	code, out, errs := e.pack("admit", compose, "--actor", "range-op", "--operator")
	if st := e.d.Exited(time.Minute); st == nil || st.String() != "signal: killed" {
		t.Fatalf("custodyd did not die mid-probe (%v); admit: %d %s %s", st, code, out, errs)
	}
	e.d.Start()

	code, out, errs = e.pack("status", "--operator", "--json")
	var list api.PackList
	// Its exit says something needs recovery; the answer says what.
	if err := json.Unmarshal([]byte(out), &list); err != nil || code == 0 || !strings.Contains(errs, "custody pack recover") {
		t.Fatalf("status: %d %s %s (%v)", code, out, errs, err)
	}
	nonce := ""
	for _, w := range list.Workspaces {
		if n, ok := strings.CutPrefix(w.ID, "probe-"); ok && w.State == api.WorkspaceCleanupPending && len(w.Resources) == 5 && w.Retry != "" {
			nonce = n
		}
	}
	if nonce == "" {
		t.Fatalf("status does not list the interrupted probe with its 5 objects: %s", out)
	}
	cli := e.engine.TestClient(t)
	f := filters.NewArgs(filters.Arg("label", "dev.custody.probe="+nonce))
	count := func() (running, all, nets int) {
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.State == "running" {
				running++
			}
		}
		ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		return running, len(cs), len(ns)
	}
	if running, all, nets := count(); running != 2 || all != 3 || nets != 2 {
		t.Fatalf("the killed probe left %d running of %d containers and %d networks, want 2 of 3 and 2", running, all, nets)
	}

	code, out, errs = e.pack("recover", "--json")
	var rec api.PackRecovery
	if err := json.Unmarshal([]byte(out), &rec); err != nil || code != 0 {
		t.Fatalf("recover: %d %s %s (%v)", code, out, errs, err)
	}
	if len(rec.Workspaces) != 1 || rec.Workspaces[0].ID != "probe-"+nonce || rec.Workspaces[0].State != api.WorkspaceClean {
		t.Errorf("recover: %s", out)
	}
	if running, all, nets := count(); all != 0 || nets != 0 {
		t.Errorf("after recover the probe's objects remain: %d containers (%d running), %d networks", all, running, nets)
	}
	if code, out, _ := e.pack("status", "--operator", "--json"); code != 0 || strings.Contains(out, "probe-"+nonce) {
		t.Errorf("status after recover still lists the probe: %d %s", code, out)
	}
}
