package daemon

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/runrecord"
)

// The wire result and receipt are the same JSON the store's run record
// holds (the API served the record's values as they were before the domain
// had its own types): converting at the edge changes no byte the client
// reads. The records are runrecord's goldens, written by the code before.
func TestWireFormIsTheRecordsJSON(t *testing.T) {
	for _, name := range []string{"launched", "refused", "failed", "recovered"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "runrecord", "testdata", "record-"+name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var parts struct {
				Result  json.RawMessage `json:"result"`
				Receipt json.RawMessage `json:"receipt"`
			}
			var rec runrecord.Record
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

// A record as this build writes it (the backend's evidence, no flat gate
// or seccomp digest) crosses the wire as the same record written before
// (the flat digests): the wire's gateSha256 and seccompSha256 keep their
// meaning.
func TestWireGateFromEvidence(t *testing.T) {
	wire := func(name string) []byte {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join("..", "runrecord", "testdata", "record-"+name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec runrecord.Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		return mustJSON(t, wireResult(rec.Result))
	}
	if got, want := wire("evidence"), wire("launched"); !bytes.Equal(got, want) || !bytes.Contains(got, []byte(`"gateSha256":"3344`)) {
		t.Errorf("wire result of the current record:\n got %s\nwant %s", got, want)
	}
}

// Attempts and recoveries cross the wire as the journal's own JSON had
// them when custodyd served it directly.
func TestWireAttemptsAreTheJournalsJSON(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 15, 2, 5, time.UTC)
	as := []journal.Attempt{
		{RunID: "r1", GrantID: "g1", State: journal.Residual, Detail: "mount busy", Retry: "custody recover",
			Started: at, Updated: at.Add(time.Second), Resources: []journal.Resource{
				{Kind: "container", Name: "custody-r1", State: "created", Identity: map[string]string{"pid": "42"}, At: at},
				{Kind: "mount", Name: "/out", State: "removed", At: at},
			}},
		{RunID: "r2", State: journal.Clean, Started: at, Updated: at},
	}
	for _, c := range []struct {
		name string
		as   []journal.Attempt
	}{{"attempts", as}, {"no attempts", nil}} {
		if got, want := mustJSON(t, wireAttempts(c.as)), mustJSON(t, c.as); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
	}
	// host.Recovery has no JSON names of its own; the wire's are the
	// ones custodyd served.
	got := mustJSON(t, wireRecovery(&host.Recovery{Attempts: as, Foreign: []string{"container custody-x"}}))
	want := `{"attempts":` + string(mustJSON(t, as)) + `,"foreign":["container custody-x"]}`
	if string(got) != want {
		t.Errorf("recovery:\n got %s\nwant %s", got, want)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A stream event encodes as json.Marshal encodes it: receipt events with
// and without either raw part, and the events encodeEvent leaves to
// encoding/json.
func TestEncodeEventIsMarshal(t *testing.T) {
	env, bundle := []byte(`{"payloadType":"t","payload":"eA==","signatures":[{"keyid":"k","sig":"cw=="}]}`),
		[]byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","dsseEnvelope":{"payload":"eA=="}}`)
	for i, ev := range []api.Event{
		{Type: api.EventReceipt, RunID: "run-1", Receipt: env, Bundle: bundle, Data: []byte("-----BEGIN PUBLIC KEY-----\n<&>\n")},
		{Type: api.EventReceipt, Receipt: env},
		{Type: api.EventReceipt, Bundle: bundle},
		{Type: api.EventReceipt},
		{Type: api.EventReceipt, RunID: "r", Receipt: env, Dropped: &api.Dropped{Stdout: 1}},
		{Type: api.EventStdout, RunID: "r", Data: []byte("out")},
		{Type: api.EventResult, RunID: "r", Result: &api.Result{}, Quarantine: &api.Quarantine{Quarantined: true}},
	} {
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("event %d: encodeEvent differs from json.Marshal:\n got %s\nwant %s", i, got, want)
		}
	}
}
