package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrustExportVerifiesRotationRecords: custody trust export lists the
// retired key with the window its hand-over record gives, read through the
// one reader that checks the record's signature by the retired key. A
// record changed after custodyd started (its time moved, so the old key's
// signature no longer holds) is refused, naming the record, instead of
// being served as the key's window.
func TestTrustExportVerifiesRotationRecords(t *testing.T) {
	e := startDaemon(t)
	e.d.Stop()
	if out, err := e.d.Command(context.Background(), "--rotate-key", "issuer").CombinedOutput(); err != nil {
		t.Fatalf("rotate: %v %s", err, out)
	}
	e.d.Start()
	code, trust, errs := e.custody("trust", "export")
	if code != exitOK || strings.Count(trust, "notAfter:") != 1 || strings.Count(trust, "notBefore:") != 1 {
		t.Fatalf("trust export after a rotation: %d %s\n%s", code, errs, trust)
	}
	recs, err := filepath.Glob(filepath.Join(e.dir, "state", "keys", "retired", "issuer-*.json"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("the rotation record: %v %v", recs, err)
	}
	rec := readBytes(t, recs[0])
	moved := strings.Replace(string(rec), `"at": "20`, `"at": "19`, 1)
	if moved == string(rec) {
		t.Fatalf("no time to move in %s", rec)
	}
	write(t, recs[0], moved)
	if code, out, errs := e.custody("trust", "export"); code == exitOK || !strings.Contains(errs, "rotation record") {
		t.Fatalf("trust export with a changed rotation record: %d %s %s", code, out, errs)
	}
	write(t, recs[0], string(rec))
}
