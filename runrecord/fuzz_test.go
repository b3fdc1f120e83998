package runrecord

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzRecord: any bytes the store hands back either do not decode, or
// decode to a record whose Encode says what json.Marshal says (the same
// bytes for the receipts this code signs, TestRecordEncodeIsMarshal; the
// same values for any other) and reads back to the same record, and whose gate and seccomp digests read without
// failing (the backend's evidence first, then the legacy flat fields).
func FuzzRecord(f *testing.F) {
	for _, name := range goldens {
		raw, err := os.ReadFile(filepath.Join("testdata", "record-"+name+".json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"owner":1,"result":{"gateSha256":"a","evidence":{"seccomp":"b"}}}`))
	f.Add([]byte(`{"result":null,"receipt":{"envelope":null,"bundle":null,"runnerPublicKey":""}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var rec Record
		if json.Unmarshal(raw, &rec) != nil {
			return
		}
		want, err := json.Marshal(rec)
		if err != nil {
			return // a receipt's raw bytes that encoding/json refuses to re-emit
		}
		got, err := rec.Encode()
		if err != nil {
			t.Fatalf("Encode failed where json.Marshal did not: %v", err)
		}
		var back Record
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("the encoding does not decode: %v\n%s", err, got)
		}
		again, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(value(t, got), value(t, want)) || !reflect.DeepEqual(value(t, again), value(t, want)) {
			t.Fatalf("encodings differ:\nEncode  %s\nMarshal %s\nagain   %s", got, want, again)
		}
		if res := rec.Result; res != nil {
			if g, ok := res.Evidence["gate"]; ok && res.Gate() != g {
				t.Fatalf("gate %q, evidence says %q", res.Gate(), g)
			}
			if _, ok := res.Evidence["seccomp"]; !ok && res.Seccomp() != res.LegacySeccompSHA256 {
				t.Fatalf("seccomp %q without evidence, legacy %q", res.Seccomp(), res.LegacySeccompSHA256)
			}
		}
	})
}

// value is b decoded as plain JSON values: two encodings that differ
// only in escaping or spacing decode alike.
func value(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return v
}
