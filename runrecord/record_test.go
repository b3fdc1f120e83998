package runrecord

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// goldens are the run records in testdata: all but evidence were written
// by the code before the backend's evidence was kept whole; evidence is a
// record as this code writes it (the backend's evidence, no flat gate or
// seccomp digest).
var goldens = []string{"launched", "refused", "failed", "recovered", "evidence"}

// The goldens in testdata are run records as the code before the domain
// got its own result type wrote them (it stored the wire api.Result). A
// record must keep reading, and a record read and written again must be
// the same bytes: the store's format did not change.
func TestRecordFormatIsUnchanged(t *testing.T) {
	for _, name := range goldens {
		t.Run(name, func(t *testing.T) {
			golden, err := os.ReadFile(filepath.Join("testdata", "record-"+name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(golden))
			dec.DisallowUnknownFields() // every field of the old record has a home
			var rec Record
			if err := dec.Decode(&rec); err != nil {
				t.Fatalf("decode a record written before: %v", err)
			}
			again, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, golden) {
				t.Errorf("the record format changed:\n got %s\nwant %s", again, golden)
			}
		})
	}
}

// The decoded record carries the domain's values, not just the bytes.
func TestRecordDecodesToDomainValues(t *testing.T) {
	var rec Record
	raw, err := os.ReadFile(filepath.Join("testdata", "record-launched.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	res := rec.Result
	switch {
	case rec.Owner != 1000 || res.Status != StatusOK || res.Runtime.Version != "1.3.0":
		t.Errorf("owner/status/runtime = %d %q %q", rec.Owner, res.Status, res.Runtime.Version)
	case res.Usage.Wall != 1500*time.Millisecond || res.Usage.CPUTimeNanos != 37e6 || res.Usage.PidsLimit != 64:
		t.Errorf("usage = %+v", res.Usage)
	case res.Cleanup == nil || !res.Cleanup.Verified || len(res.Cleanup.Steps) != 2 || res.Cleanup.Steps[1].Detail != "removed and verified gone":
		t.Errorf("cleanup = %+v", res.Cleanup)
	case len(res.Inputs) != 1 || res.Inputs[0].Digest == "" || res.Inputs[0].Target != "/in":
		t.Errorf("inputs = %+v", res.Inputs)
	case res.Streams == nil || !res.Streams.Stderr.Truncated || res.Output == nil || len(res.Output.Files) != 2:
		t.Errorf("streams/output = %+v %+v", res.Streams, res.Output)
	case rec.Receipt == nil || !json.Valid(rec.Receipt.Envelope) || !json.Valid(rec.Receipt.Bundle):
		t.Errorf("receipt = %+v", rec.Receipt)
	}

	raw, err = os.ReadFile(filepath.Join("testdata", "record-refused.json"))
	if err != nil {
		t.Fatal(err)
	}
	rec = Record{}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if r := rec.Result; r.Status != StatusRefused || len(r.Refusal) != 2 || r.Refusal[0].Verdict != "unsupported" || r.Refusal[0].Fix == "" {
		t.Errorf("refusal = %+v", r.Refusal)
	}
}

// Encode writes what json.Marshal writes, for every golden record and for
// records with and without a receipt, a receipt error, an empty bundle,
// and a key and an error needing escapes.
func TestRecordEncodeIsMarshal(t *testing.T) {
	var recs []Record
	for _, name := range goldens {
		golden, err := os.ReadFile(filepath.Join("testdata", "record-"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec Record
		if err := json.Unmarshal(golden, &rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	res := recs[0].Result
	recs = append(recs,
		Record{Owner: 4294967295, Result: res, Receipt: &Receipt{Envelope: []byte(`{"payload":"eA=="}`),
			Bundle: []byte(`{"mediaType":"m"}`), RunnerPublicKey: "-----BEGIN PUBLIC KEY-----\n<&>\"\n"}},
		Record{Result: res, Receipt: &Receipt{RunnerPublicKey: "k"}},
		Record{Owner: 7, Result: res, ReceiptError: "signing failed: <bad> & \"quoted\"\n\u2028"},
		Record{Owner: 7},
	)
	for i, rec := range recs {
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rec.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("record %d: encode differs from json.Marshal:\n got %s\nwant %s", i, got, want)
		}
	}
}

// The flat gate and seccomp digests are read from records that have them
// and written for none: a record as this code writes it (evidence) and
// one written before (launched) say the same digests, and a result made
// with the backend's evidence encodes without the flat fields.
func TestLegacyFlatDigests(t *testing.T) {
	read := func(name string) *Result {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join("testdata", "record-"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		return rec.Result
	}
	legacy, current := read("launched"), read("evidence")
	if legacy.Evidence != nil || legacy.LegacyGateSHA256 == "" || legacy.LegacySeccompSHA256 == "" {
		t.Fatalf("the golden written before has evidence %v, flat gate %q, seccomp %q", legacy.Evidence, legacy.LegacyGateSHA256, legacy.LegacySeccompSHA256)
	}
	if current.LegacyGateSHA256 != "" || current.LegacySeccompSHA256 != "" || current.Evidence["gate"] == "" {
		t.Fatalf("the current golden: flat gate %q, seccomp %q, evidence %v", current.LegacyGateSHA256, current.LegacySeccompSHA256, current.Evidence)
	}
	if legacy.Gate() != current.Gate() || legacy.Seccomp() != current.Seccomp() || legacy.Gate() == "" || legacy.Seccomp() == "" {
		t.Errorf("gate %q / %q, seccomp %q / %q: the two records say different digests", legacy.Gate(), current.Gate(), legacy.Seccomp(), current.Seccomp())
	}
	// The backend's evidence is what the sandbox reported: it wins over a
	// flat field, and a backend with no gate (a VM) has none.
	both := &Result{LegacyGateSHA256: "old", Evidence: map[string]string{"gate": "new"}}
	if both.Gate() != "new" {
		t.Errorf("gate with both = %q, want the evidence's", both.Gate())
	}
	vm := &Result{Evidence: map[string]string{"runtime": "x"}}
	if vm.Gate() != "" || vm.Seccomp() != "" {
		t.Errorf("a backend without a gate: gate %q, seccomp %q", vm.Gate(), vm.Seccomp())
	}
	b, err := json.Marshal(current)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(`"gateSha256"`)) || bytes.Contains(b, []byte(`"seccompSha256"`)) {
		t.Errorf("a result with the backend's evidence wrote the flat digests: %s", b)
	}
}
