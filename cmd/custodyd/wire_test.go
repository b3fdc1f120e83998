package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/launch"
)

// The wire result and receipt are the same JSON the store's run record
// holds (the API served the record's values as they were before the domain
// had its own types): converting at the edge changes no byte the client
// reads. The records are launch's goldens, written by the code before.
func TestWireFormIsTheRecordsJSON(t *testing.T) {
	for _, name := range []string{"launched", "refused", "failed", "recovered"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "launch", "testdata", "record-"+name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var parts struct {
				Result  json.RawMessage `json:"result"`
				Receipt json.RawMessage `json:"receipt"`
			}
			var rec launch.Record
			if err := json.Unmarshal(raw, &parts); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &rec); err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(wireResult(rec.Result))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, parts.Result) {
				t.Errorf("wire result:\n got %s\nwant %s", got, parts.Result)
			}
			if rec.Receipt == nil {
				if wireReceipt(nil) != nil {
					t.Error("no receipt became one")
				}
				return
			}
			got, err = json.Marshal(wireReceipt(rec.Receipt))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, parts.Receipt) {
				t.Errorf("wire receipt:\n got %s\nwant %s", got, parts.Receipt)
			}
		})
	}
}
