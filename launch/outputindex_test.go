package launch

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/runrecord"
)

// The output index reads three fields of a record's JSON: it must find in
// every golden record exactly what decoding the whole Record finds.
func TestOutputIndexReadsWhatTheRecordSays(t *testing.T) {
	idx := OutputIndex()
	indexed := 0
	for _, name := range []string{"launched", "refused", "failed", "recovered"} {
		raw, err := os.ReadFile(filepath.Join("..", "runrecord", "testdata", "record-"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec runrecord.Record
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
