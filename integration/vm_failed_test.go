package integration

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
)

// receiptStatement reads a receipt file's statement: its predicate type
// and predicate.
func receiptStatement(t *testing.T, file string) (string, evidence.Receipt) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var env struct{ Payload string }
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		PredicateType string           `json:"predicateType"`
		Predicate     evidence.Receipt `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	return st.PredicateType, st.Predicate
}

// TestVMFailedRunReceiptSaysWhatHappened: a vm run that fails after its
// workload ran (an output file name that is not UTF-8; an output tree 170
// directories deep) gets a receipt that says the workload ran and how it
// ended: its exit code 9, QEMU's CPU time and peak memory as the host
// accounted them, the wall time, the observation's time, and the digest
// of what it wrote to stdout; never "the container never started" with
// code 0 and zero usage. The receipt verifies.
func TestVMFailedRunReceiptSaysWhatHappened(t *testing.T) {
	e := startVMDaemon(t)
	trust := e.trust(t, "trust-dev.yaml", "development")
	burn := `i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo ran`
	for _, tt := range []struct{ name, script string }{
		{"non-utf8-name", burn + `; echo x > "/out/$(printf 'bad\377name')"; exit 9`},
		{"deep-tree", burn + `; d=/out; i=0; while [ $i -lt 170 ]; do d=$d/dddddddddddddddddddddddddddd; i=$((i+1)); done; mkdir -p $d && echo deep > $d/f; exit 9`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd, _ := json.Marshal([]string{"/bin/sh", "-c", tt.script})
			phase := e.vmPhase(t, tt.name, string(cmd), "300s")
			out := filepath.Join(e.dir, tt.name+"-out")
			receipt := filepath.Join(out, "receipt.json")
			code, stdout, errs := e.custody("run", "--grant", e.grant(t, phase), "--receipt", receipt)
			t.Logf("run: %d\n%s\n%s", code, stdout, errs)
			if code == exitOK {
				t.Fatalf("a run whose output cannot be kept succeeded")
			}
			ptype, r := receiptStatement(t, receipt)
			t.Logf("receipt %s: exit %+v usage %+v unobserved %v observed notes %q", ptype, r.Exit, r.Usage, r.Unobserved, r.Observed.Notes)
			if r.Exit.Status != evidence.StatusFailed || r.Exit.Code != 9 || slices.Contains(r.Unobserved, "exit.code") {
				t.Errorf("exit %+v (unobserved %v): want failed, code 9", r.Exit, r.Unobserved)
			}
			for _, n := range r.Observed.Notes {
				if strings.Contains(n, "never started") {
					t.Errorf("the receipt says %q of a workload that ran", n)
				}
			}
			if r.Observed.At.IsZero() {
				t.Error("no observation time")
			}
			if r.Usage.CPUTimeMillis <= 0 || r.Usage.PeakMemoryBytes <= 0 || r.Usage.WallMillis <= 0 {
				t.Errorf("usage %+v: QEMU's host CPU time, peak memory and the wall time were observed", r.Usage)
			}
			if want := sha256Hex([]byte("ran\n")); r.Streams == nil || r.Streams.Stdout.SHA256 != want {
				t.Errorf("stdout digest %+v, want %s", r.Streams, want)
			}
			if code, vout, verrs := e.custody("verify", receipt, "--trust", trust, "--no-outputs-unsafe"); code != verifyPromotable && code != verifyAuthentic {
				t.Fatalf("verify: %d\n%s%s", code, vout, verrs)
			}
		})
	}
}
