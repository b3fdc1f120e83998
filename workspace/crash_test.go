package workspace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/workspace"
)

// The crash child: the test binary run again with crashEnv set to a fault
// stage ("created:db"; "realized#2": the second time it is reached). It brings the pack up
// and SIGKILLs itself at that stage, as a custodyd dying mid-up would.
const (
	crashEnv      = "CUSTODY_WORKSPACE_CRASH"
	crashStateEnv = "CUSTODY_WORKSPACE_CRASH_STATE"
	crashHostEnv  = "CUSTODY_WORKSPACE_CRASH_HOST"
)

// childTB is a tb for the child: failures exit it with status 3.
type childTB struct{ cleanups []func() }

func (c *childTB) Helper()          {}
func (c *childTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }
func (c *childTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(3)
}

func crashChild() int {
	stage, nth := os.Getenv(crashEnv), 1
	if s, n, ok := strings.Cut(stage, "#"); ok {
		stage = s
		nth, _ = strconv.Atoi(n)
	}
	seen := 0
	fault := func(s string) {
		if s == stage {
			if seen++; seen == nth {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	state := os.Getenv(crashStateEnv)
	m, _, _, _, _, _ := manager(&childTB{}, os.Getenv(crashHostEnv), state, fault)
	if stage == probeCrash {
		// A dry run probes the engine first (a fresh manager has no
		// profile); the parent kills this process mid-probe.
		if _, err := m.Admit(context.Background(), []byte(rangePack), filepath.Join(state, "pack"), actor); err != nil {
			fmt.Fprintln(os.Stderr, "admit:", err)
			return 3
		}
		fmt.Fprintln(os.Stderr, "admit finished: the fault stage was never reached")
		return 4
	}
	g, err := os.ReadFile(filepath.Join(state, "grant.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if _, err := m.Up(context.Background(), g, "ws-crash", root); err != nil {
		fmt.Fprintln(os.Stderr, "up:", err)
		return 3
	}
	if stage == workspace.FaultStopped || stage == workspace.FaultTornDown {
		if _, err := m.Down(context.Background(), "ws-crash", true); err != nil {
			fmt.Fprintln(os.Stderr, "down:", err)
			return 3
		}
	}
	fmt.Fprintln(os.Stderr, "up finished: the fault stage was never reached")
	return 4
}

// custodyd SIGKILLed at each stage of up or down leaves the workspace in an
// explicit state (clean when nothing was spent, cleanup-pending after),
// and recovery removes everything the attempt made, by verified ID.
func TestCrashMidUpOrDownRecovers(t *testing.T) {
	dt := dockertest.Shared(t)
	stages := []string{workspace.FaultClaimed, workspace.FaultConsumed, workspace.FaultNetworks, workspace.FaultVolumes,
		// Containers are created (then started) side by side, so a stage
		// names the object: after it, the others may or may not be made.
		// web depends on db and cache: it is started last.
		workspace.FaultSecrets, workspace.FaultCreated + ":cache", workspace.FaultCreated + ":web", workspace.FaultStarted + ":db",
		workspace.FaultStarted + ":web", workspace.FaultRealized,
		// A crash between a container's create and the record of its ID:
		// the journal holds its intent (with its nonce label) only.
		workspace.FaultCreated + ":db" + lostID,
		// A crash mid-down: stopped, and removed but not yet receipted.
		workspace.FaultStopped, workspace.FaultTornDown}
	for i, stage := range stages {
		t.Run(stage, func(t *testing.T) {
			// Side by side: each stage has its own store and its own
			// subnet pool, so no two choose the same subnets.
			t.Parallel()
			ctx := testCtx(t)
			state := t.TempDir()
			must(t, os.WriteFile(filepath.Join(state, "subnet-pool"), fmt.Appendf(nil, "10.%d.0.0/16\n", 100+i), 0o600))
			issue := &childTB{}
			m, db, _, _, _, _ := manager(issue, dt.Host, state, nil)
			g, err := m.Issue(ctx, []byte(rangePack), filepath.Join(state, "pack"), actor, 3600e9)
			if err != nil {
				t.Fatal(err)
			}
			must(t, os.WriteFile(filepath.Join(state, "grant.json"), g, 0o600))
			db.Close() // the child takes the store's lock

			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashEnv+"="+strings.TrimSuffix(stage, lostID), crashStateEnv+"="+state, crashHostEnv+"="+dt.Host)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die by SIGKILL at %s: %v\n%s", stage, err, out)
			}

			if strings.HasSuffix(stage, lostID) {
				loseLastID(t, state)
			}
			e := setup(t, state, nil)
			st, err := e.m.Status(ctx, "ws-crash")
			if err != nil {
				t.Fatal(err)
			}
			want := workspace.StateCleanupPending
			if stage == workspace.FaultClaimed {
				want = workspace.StateClean
			}
			if strings.HasSuffix(stage, lostID) && !slices.ContainsFunc(st.Resources, func(r workspace.ResourceStatus) bool { return r.State == "unknown" }) {
				t.Errorf("no resource of unknown state: %+v", st.Resources)
			}
			if st.State != want {
				t.Errorf("after a crash at %s: %s, want %s (%+v)", stage, st.State, want, st.Resources)
			}
			if stage == workspace.FaultClaimed {
				// Nothing was spent: the same grant still goes up, once.
				e.up(ctx, g, "ws-crash-again")
				if d := e.down(ctx, "ws-crash-again", true); d.State != workspace.StateClean {
					t.Errorf("down: %s %s", d.State, d.Detail)
				}
			} else if _, err := e.m.Up(ctx, g, "ws-crash-again", root); grantCode(err) != grant.CodeReplayed {
				t.Errorf("the grant of the crashed up: %v, want replayed", err)
			}
			reps, err := e.m.Recover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if stage != workspace.FaultClaimed && (len(reps) != 1 || reps[0].State != workspace.StateClean) {
				t.Errorf("recover: %+v", reps)
			}
			st, err = e.m.Status(ctx, "ws-crash")
			if err != nil || st.State != workspace.StateClean || len(st.Foreign) != 0 {
				t.Errorf("after recover: %+v %v", st, err)
			}
			if n := objects(ctx, t, e.cli, st.ID); n != 0 {
				t.Errorf("%d objects of the workspace remain after recover", n)
			}
			if _, err := os.Stat(filepath.Join(state, "run", "workspaces", st.ID)); !os.IsNotExist(err) {
				t.Errorf("credential files remain: %v", err)
			}
			if again, err := e.m.Recover(ctx); err != nil || len(again) != 0 {
				t.Errorf("a second recover acted: %+v %v", again, err)
			}
		})
	}
}

const lostID = "/lost-id"

// loseLastID rewrites the journal as if the last container created had
// not had its ID recorded: its record keeps the intent and its nonce.
func loseLastID(t *testing.T, state string) {
	t.Helper()
	db, err := store.Open(filepath.Join(state, "custody.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(store.PackJournal, func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			var a journal.Attempt
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			for i := len(a.Resources) - 1; i >= 0; i-- {
				r := &a.Resources[i]
				if strings.HasSuffix(r.Kind, "container") && r.State == journal.Created {
					r.State = journal.Intent
					delete(r.Identity, "id")
					break
				}
			}
			nv, err := json.Marshal(&a)
			if err != nil {
				return err
			}
			return b.Put(k, nv)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
