package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestControlSocketPermissionIsRefused: a user who may not open the
// control socket is refused (2: nothing changed), for every command that
// uses it, not told the runner failed (3). Root, who may, is answered.
func TestControlSocketPermissionIsRefused(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "perm", "true", "")
	if err := os.Chmod(phase, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][]string{
		{"status", "--operator"},
		{"grant", "issue", phase, "--actor", "ci-bot"},
		{"grant", "revoke", "g1"},
		{"quarantine", "status"},
		{"policy", "reload"},
		{"recover"},
		{"cancel", "--operator", "r1"},
	} {
		code, _, errs := e.custodyAs(t, 65534, l...)
		if code != exitRefused || !strings.Contains(errs, "permission denied") || !strings.Contains(errs, e.control) {
			t.Errorf("custody %s as uid 65534: exit %d, want %d (refused)\n%s", strings.Join(l, " "), code, exitRefused, errs)
		}
	}
	if code, _, errs := e.custody("quarantine", "status"); code != exitOK {
		t.Fatalf("quarantine status as root: exit %d %s", code, errs)
	}
}

// TestRerunSameReceipt: running again with the --receipt of an earlier
// run is refused before anything is asked of custodyd (the grant stays
// unspent and launches with a fresh path), whether the receipt, its
// bundle or only the outputs directory is there; the earlier evidence is
// left as it was, and a successful save leaves no partial directory.
func TestRerunSameReceipt(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "rerun", "echo $RANDOM$$ > /out/x", "")
	out := filepath.Join(e.dir, "out")
	receipt := filepath.Join(out, "receipt.json")
	if code, _, errs := e.custody("run", "--grant", e.grant(t, phase), "--receipt", receipt); code != exitOK {
		t.Fatalf("first run: %d %s", code, errs)
	}
	before, _ := os.ReadFile(receipt)
	first, _ := os.ReadFile(filepath.Join(out, "outputs", "x"))
	ents, _ := os.ReadDir(out)
	if len(ents) != 3 {
		t.Fatalf("out holds %v, want receipt, bundle and outputs only", ents)
	}

	g := e.grant(t, phase)
	rerun := func(want string, args ...string) {
		t.Helper()
		code, stdout, errs := e.custody(append([]string{"run", "--grant", g}, args...)...)
		if code != exitRefused || !strings.Contains(errs, want) || !strings.Contains(errs, "already exists") || strings.Contains(errs, "started") {
			t.Fatalf("rerun %v: exit %d, want %d naming %s before starting\n%s%s", args, code, exitRefused, want, stdout, errs)
		}
	}
	rerun("receipt.json", "--receipt", receipt)
	if err := os.Rename(receipt, receipt+".kept"); err != nil {
		t.Fatal(err)
	}
	rerun("receipt.sigstore.json", "--receipt", receipt)
	if err := os.Rename(bundlePath(receipt), bundlePath(receipt)+".kept"); err != nil {
		t.Fatal(err)
	}
	rerun("outputs", "--receipt", receipt)
	fresh := filepath.Join(e.dir, "fresh", "receipt.json")
	rerun("outputs", "--receipt", fresh, "--outputs", filepath.Join(out, "outputs"))
	if _, err := os.Lstat(receipt); err == nil {
		t.Fatal("a refused rerun wrote a receipt")
	}
	after, _ := os.ReadFile(receipt + ".kept")
	kept, _ := os.ReadFile(filepath.Join(out, "outputs", "x"))
	if !bytes.Equal(before, after) || !bytes.Equal(first, kept) {
		t.Fatal("a refused rerun changed the earlier evidence")
	}
	// The grant was never spent: it launches with a fresh path.
	if code, _, errs := e.custody("run", "--grant", g, "--receipt", fresh); code != exitOK {
		t.Fatalf("the grant after the refusals: %d %s", code, errs)
	}
	ents, _ = os.ReadDir(filepath.Dir(fresh))
	if len(ents) != 3 {
		t.Fatalf("fresh holds %v, want receipt, bundle and outputs only", ents)
	}
}

// TestOutputsAppearingMidRun: an outputs directory made while the run
// goes on is neither written into nor replaced, and no receipt is written
// beside it (exit 3: custody could not save the evidence).
func TestOutputsAppearingMidRun(t *testing.T) {
	e := startDaemon(t)
	g := e.grant(t, e.phase(t, "race", "echo x > /out/x; sleep 3", ""))
	out := filepath.Join(e.dir, "race")
	receipt := filepath.Join(out, "receipt.json")
	done := make(chan [3]string, 1)
	go func() {
		code, stdout, errs := e.custody("run", "--grant", g, "--receipt", receipt)
		done <- [3]string{strconv.Itoa(code), stdout, errs}
	}()
	// Once the run is running, the CLI is past its checks of the paths.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, stdout, _ := e.custody("status", "--operator")
		var st struct {
			Status struct{ Running []string } `json:"status"`
		}
		if json.Unmarshal([]byte(stdout), &st) == nil && len(st.Status.Running) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never showed as running")
		}
	}
	foreign := filepath.Join(out, "outputs")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(foreign, "mine"), "not the run's\n")
	r := <-done
	if r[0] != strconv.Itoa(exitInternal) || !strings.Contains(r[2], "already exists") {
		t.Fatalf("exit %s, want %d naming the directory\n%s%s", r[0], exitInternal, r[1], r[2])
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 1 || ents[0].Name() != "outputs" {
		t.Fatalf("out holds %v, want the foreign outputs only (no receipt, no partial directory)", ents)
	}
	if got, _ := os.ReadDir(foreign); len(got) != 1 {
		t.Fatalf("the foreign directory was written into: %v", got)
	}
}
