package launch

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/runner"
)

// The goldens in testdata are run records as the code before the domain
// got its own result type wrote them (it stored the wire api.Result). A
// record must keep reading, and a record read and written again must be
// the same bytes: the store's format did not change.
func TestRecordFormatIsUnchanged(t *testing.T) {
	for _, name := range []string{"launched", "refused", "failed", "recovered"} {
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
	case rec.Owner != 1000 || res.Status != runner.StatusOK || res.Runtime.Version != "1.3.0":
		t.Errorf("owner/status/runtime = %d %q %q", rec.Owner, res.Status, res.Runtime.Version)
	case res.Usage.Wall != 1500*time.Millisecond || res.Usage.CPUTimeNanos != 37e6 || res.Usage.PidsLimit != 64:
		t.Errorf("usage = %+v", res.Usage)
	case res.Cleanup == nil || !res.Cleanup.Verified || len(res.Cleanup.Steps) != 2 || res.Cleanup.Steps[1].Detail != "removed and verified gone":
		t.Errorf("cleanup = %+v", res.Cleanup)
	case len(res.Inputs) != 1 || res.Inputs[0].Digest == "" || res.Inputs[0].Root != "":
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
	if r := rec.Result; r.Status != runner.StatusRefused || len(r.Refusal) != 2 || r.Refusal[0].Verdict != admission.Unsupported || r.Refusal[0].Fix == "" {
		t.Errorf("refusal = %+v", r.Refusal)
	}
}

// encode writes what json.Marshal writes, for every golden record and for
// records with and without a receipt, a receipt error, an empty bundle,
// and a key and an error needing escapes.
func TestRecordEncodeIsMarshal(t *testing.T) {
	var recs []Record
	for _, name := range []string{"launched", "refused", "failed", "recovered"} {
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
		got, err := rec.encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("record %d: encode differs from json.Marshal:\n got %s\nwant %s", i, got, want)
		}
	}
}

// The output index reads three fields of a record's JSON: it must find in
// every golden record exactly what decoding the whole Record finds.
func TestOutputIndexReadsWhatTheRecordSays(t *testing.T) {
	idx := OutputIndex()
	indexed := 0
	for _, name := range []string{"launched", "refused", "failed", "recovered"} {
		raw, err := os.ReadFile(filepath.Join("testdata", "record-"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		got := idx.Entries(raw)
		if rec.Result == nil || rec.Result.Output == nil || rec.Result.Output.Digest == "" {
			if len(got) != 0 {
				t.Errorf("%s: no output, but the index has %v", name, got)
			}
			continue
		}
		want, _ := json.Marshal(indexedProducer{Actor: rec.Result.Actor, Stage: rec.Result.Stage})
		if len(got) != 1 || got[0].Key != outputKey(rec.Result.Output.Digest) || !bytes.Equal(got[0].Value, want) {
			t.Errorf("%s: index entries %+v, want key %s value %s", name, got, outputKey(rec.Result.Output.Digest), want)
		}
		indexed++
	}
	if indexed == 0 {
		t.Fatal("no golden record has an output: the test checks nothing")
	}
	if got := idx.Entries([]byte("not json")); len(got) != 0 {
		t.Errorf("undecodable record indexed: %v", got)
	}
}
