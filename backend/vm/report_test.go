package vm_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/keys"
)

// TestCleanupFailureSigns: a cleanup step that fails with a multi-line
// error (here a bundle left behind under a runtime dir whose name holds a
// newline, which a path may) still goes into a receipt the runner can
// sign: the step's detail is put on one line, as every backend's is. The
// legitimate case beside it: the same report with the bundle gone is
// verified.
func TestCleanupFailureSigns(t *testing.T) {
	opts := pins(t)
	opts.Accel = "tcg"
	opts.RuntimeDir = filepath.Join(t.TempDir(), "vm\nruns")
	b, err := vm.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	const id = "left-behind"
	if err := os.Mkdir(filepath.Join(opts.RuntimeDir, id), 0o700); err != nil {
		t.Fatal(err)
	}
	rep := b.VerifyAbsent(id, nil)
	if rep.Verified {
		t.Fatalf("a bundle left behind was verified absent: %+v", rep.Steps)
	}
	failed := false
	for _, s := range rep.Steps {
		if !s.OK {
			failed = true
			if !strings.Contains(s.Detail, id) {
				t.Errorf("step %q does not name the bundle: %q", s.Name, s.Detail)
			}
		}
	}
	if !failed {
		t.Fatalf("no step failed: %+v", rep.Steps)
	}
	if err := signCleanup(t, rep); err != nil {
		t.Fatalf("a receipt holding the failed cleanup cannot be signed: %v", err)
	}
	if err := os.Remove(filepath.Join(opts.RuntimeDir, id)); err != nil {
		t.Fatal(err)
	}
	if rep := b.VerifyAbsent(id, nil); !rep.Verified {
		t.Fatalf("with the bundle gone: %+v", rep.Steps)
	}
}

// signCleanup signs a receipt (the evidence package's golden failed run,
// re-signed by a fresh runner key) whose cleanup is rep, as the runner
// copies a backend's report into it.
func signCleanup(t *testing.T, rep backend.CleanupReport) error {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "evidence", "testdata", "receipt-v3-failed.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env struct{ Payload string }
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Predicate evidence.Receipt }
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	r := st.Predicate
	r.Runner.ID = k.ID()
	if _, err := evidence.SignReceipt(context.Background(), k, r); err != nil {
		t.Fatalf("the golden receipt, re-signed as it is: %v", err)
	}
	r.Cleanup = evidence.Cleanup{Verified: rep.Verified}
	for _, s := range rep.Steps {
		r.Cleanup.Steps = append(r.Cleanup.Steps, evidence.CleanupStep{Name: s.Name, OK: s.OK, Detail: s.Detail})
	}
	_, err = evidence.SignReceipt(context.Background(), k, r)
	return err
}
