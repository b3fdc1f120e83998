package grant

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// The frame in-toto's parser checks is the statement with its predicate
// emptied and nothing else changed; signStatement signs a statement whose
// frame in-toto accepts and refuses one whose frame it refuses, even when
// the statement's own decoder accepts it.
func TestStatementFrameIsTheStatementWithoutPredicate(t *testing.T) {
	payload, frame, err := encodeStatementOf(map[string]any{"id": "g-1", "n": 2}, predicate.Grant, "phase/x", []byte("content"))
	if err != nil {
		t.Fatal(err)
	}
	var p, f map[string]json.RawMessage
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(frame, &f); err != nil {
		t.Fatal(err)
	}
	if string(f["predicate"]) != "{}" || string(p["predicate"]) == "{}" {
		t.Fatalf("predicate: payload %s, frame %s", p["predicate"], f["predicate"])
	}
	delete(p, "predicate")
	delete(f, "predicate")
	if !maps.EqualFunc(p, f, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
		t.Fatalf("the frame differs from the statement beyond its predicate:\n%s\n%s", payload, frame)
	}

	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	accept := func([]byte) error { return nil }
	if _, err := signStatement(context.Background(), issuer, payload, frame, accept); err != nil {
		t.Fatalf("a good statement: %v", err)
	}
	f["predicate"], f["subject"] = json.RawMessage(`{}`), json.RawMessage(`[{"name":"phase/x"}]`)
	noDigest, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signStatement(context.Background(), issuer, payload, noDigest, accept); err == nil {
		t.Fatal("a frame in-toto refuses (a subject with no digest) was signed")
	}
}
