package evidence_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
)

// rewritePayload decodes a receipt's statement, lets edit change it and
// encodes it back (the signature no longer matches: the schema does not
// look at it).
func rewritePayload(t *testing.T, envelope []byte, edit func(st map[string]any)) []byte {
	t.Helper()
	var env map[string]any
	if err := json.Unmarshal(envelope, &env); err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(env["payload"].(string))
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	edit(st)
	raw, _ = json.Marshal(st)
	env["payload"] = base64.StdEncoding.EncodeToString(raw)
	out, _ := json.Marshal(env)
	return out
}

// TestReceiptSchema: every golden receipt (v1 to v3, ok and failed)
// satisfies custody schema receipt, envelope and statement; a statement
// with a member the format does not have, a v3 receipt carrying egress (a
// v4 member), a missing exit and a non-digest image do not. (Real v3 and
// v4 receipts from a real custodyd are checked in cmd/custody.)
func TestReceiptSchema(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "receipt*.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("golden receipts: %v %v", files, err)
	}
	var v3 []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := evidence.CheckReceiptSchema(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if filepath.Base(f) == "receipt-v3.json" {
			v3 = data
		}
	}
	for name, edit := range map[string]func(st map[string]any){
		"unknown member": func(st map[string]any) { st["predicate"].(map[string]any)["extra"] = 1 },
		"egress on v3": func(st map[string]any) {
			st["predicate"].(map[string]any)["egress"] = map[string]any{"allow": []any{}, "decisions": []any{}, "bytes": 0}
		},
		"pooled on v3": func(st map[string]any) {
			st["predicate"].(map[string]any)["pooled"] = map[string]any{"profile": "p", "sandbox": "s", "preparedAt": "2026-01-01T00:00:00Z"}
		},
		"v5 without pooled":  func(st map[string]any) { st["predicateType"] = "https://custody.dev/attestation/receipt/v5" },
		"no exit":            func(st map[string]any) { delete(st["predicate"].(map[string]any), "exit") },
		"image not a digest": func(st map[string]any) { st["predicate"].(map[string]any)["image"] = "busybox:latest" },
		"unknown version":    func(st map[string]any) { st["predicateType"] = "https://custody.dev/attestation/receipt/v9" },
	} {
		if err := evidence.CheckReceiptSchema(rewritePayload(t, v3, edit)); err == nil {
			t.Errorf("%s: passed the receipt schema", name)
		}
	}
	if err := evidence.CheckReceiptSchema([]byte(strings.Replace(string(v3), `"payloadType"`, `"payloadKind"`, 1))); err == nil {
		t.Error("an envelope without payloadType passed the receipt schema")
	}
}
