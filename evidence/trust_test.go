package evidence_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/evidence"
)

// exampleTrust is the trust file of the package documentation, with key
// files next to it.
const exampleTrust = `apiVersion: custody.dev/v1alpha1
kind: Trust
runners:
  - name: ci-runner-1
    publicKey: keys/runner.pub
    notBefore: 2026-01-01T00:00:00Z
    notAfter: 2027-01-01T00:00:00Z
    revokedAt: 2026-06-01T00:00:00Z
issuers:
  - name: ci-issuer
    publicKey: issuer.pub
maxAge: 24h
tiers: [production]
accept:
  statuses: [ok]
  requireCleanVerified: true
revocation:
  acceptBefore: false
retention:
  receipts: 720h
  outputs: 168h
`

func writeKeys(t *testing.T, dir string, f *fixture) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "keys"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "keys", "runner.pub"), f.runner.PublicPEM(), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "issuer.pub"), f.issuer.PublicPEM(), 0o644))
}

func TestLoadTrust(t *testing.T) {
	f := &fixture{runner: newKey(t), issuer: newKey(t)}
	dir := t.TempDir()
	writeKeys(t, dir, f)
	path := filepath.Join(dir, "trust.yaml")
	must(t, os.WriteFile(path, []byte(exampleTrust), 0o644))
	tr, err := evidence.LoadTrust(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Runners) != 1 || tr.Runners[0].Name != "ci-runner-1" || tr.Runners[0].ID() != f.runner.ID() {
		t.Fatalf("runners %+v", tr.Runners)
	}
	r := tr.Runners[0]
	if !r.NotBefore.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || !r.NotAfter.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) ||
		!r.RevokedAt.Equal(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("runner times %+v", r)
	}
	if len(tr.Issuers) != 1 || tr.Issuers[0].ID() != f.issuer.ID() {
		t.Fatalf("issuers %+v", tr.Issuers)
	}
	if tr.MaxAge != 24*time.Hour || !reflect.DeepEqual(tr.Tiers, []string{"production"}) || !reflect.DeepEqual(tr.Statuses, []string{"ok"}) ||
		!tr.RequireCleanVerified || tr.AcceptBeforeRevocation || tr.ReceiptsRetention != 720*time.Hour || tr.OutputsRetention != 168*time.Hour {
		t.Fatalf("trust %+v", tr)
	}
	if tr.Digest != digestOf(exampleTrust) || tr.Path != path {
		t.Fatalf("digest %s path %s", tr.Digest, tr.Path)
	}
	if _, err := evidence.NewVerifier(tr); err != nil {
		t.Fatal(err)
	}
}

func TestTrustDefaults(t *testing.T) {
	f := &fixture{runner: newKey(t), issuer: newKey(t)}
	tr := parseTrust(t, trustYAML(f.runner, f.issuer, "", ""))
	if tr.MaxAge != evidence.DefaultMaxAge || !reflect.DeepEqual(tr.Tiers, []string{"production"}) ||
		!reflect.DeepEqual(tr.Statuses, []string{"ok"}) || !tr.RequireCleanVerified || tr.AcceptBeforeRevocation ||
		tr.ReceiptsRetention != 720*time.Hour || tr.OutputsRetention != 168*time.Hour || tr.Path != "" {
		t.Fatalf("defaults %+v", tr)
	}
}

func TestParseTrustRefuses(t *testing.T) {
	f := &fixture{runner: newKey(t), issuer: newKey(t)}
	dir := t.TempDir()
	writeKeys(t, dir, f)
	valid := strings.Replace(exampleTrust, "    revokedAt: 2026-06-01T00:00:00Z\n", "", 1)
	if _, err := evidence.ParseTrust([]byte(valid), dir); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, old, new, want string
	}{
		{"unknown top-level field", "maxAge: 24h\n", "maxAge: 24h\nmaxage: 1h\n", `unknown field "maxage"`},
		{"unknown key field", "    publicKey: issuer.pub\n", "    publicKey: issuer.pub\n    pubkey: x\n", `unknown field "pubkey"`},
		{"unknown accept field", "  statuses: [ok]\n", "  statuses: [ok]\n  anything: true\n", `unknown field "anything"`},
		{"wrong kind", "kind: Trust", "kind: Policy", "/kind"},
		{"wrong apiVersion", "custody.dev/v1alpha1", "custody.dev/v1", "/apiVersion"},
		{"no runners", "runners:\n  - name: ci-runner-1\n    publicKey: keys/runner.pub\n    notBefore: 2026-01-01T00:00:00Z\n    notAfter: 2027-01-01T00:00:00Z\n", "runners: []\n", "/runners"},
		{"missing key file", "publicKey: issuer.pub", "publicKey: nothere.pub", "issuers[0].publicKey"},
		{"key file is a directory", "publicKey: issuer.pub", "publicKey: keys", "not a regular file"},
		{"no key", "    publicKey: issuer.pub\n", "", "no publicKey or publicKeyPEM"},
		{"bad inline key", "    publicKey: issuer.pub\n", "    publicKeyPEM: not a key\n", "issuers[0].publicKeyPEM"},
		{"runner key is issuer key", "publicKey: issuer.pub", "publicKey: keys/runner.pub", "already listed at runners[0]"},
		{"bad time", "notBefore: 2026-01-01T00:00:00Z", "notBefore: 2026-01-01", "notBefore"},
		{"empty window", "notAfter: 2027-01-01T00:00:00Z", "notAfter: 2025-01-01T00:00:00Z", "is not after notBefore"},
		{"bad tier", "tiers: [production]", "tiers: [prod]", "/tiers/0"},
		{"bad status", "statuses: [ok]", "statuses: [refused]", "/accept/statuses/0"},
		{"duplicate status", "statuses: [ok]", "statuses: [ok, ok]", "accept.statuses[1]"},
		{"bad duration", "maxAge: 24h", "maxAge: 1d", "/maxAge"},
		{"numeric duration", "maxAge: 24h", "maxAge: 24", "/maxAge"},
		{"zero duration", "maxAge: 24h", "maxAge: 0s", "write a positive duration"},
		{"bad name", "name: ci-issuer", "name: CI Issuer", "/issuers/0/name"},
		{"alias", "maxAge: 24h\n", "maxAge: &a 24h\n", "anchor"},
		{"two documents", "maxAge: 24h\n", "maxAge: 24h\n---\n{}\n", "second YAML document"},
		{"duplicate key", "maxAge: 24h\n", "maxAge: 24h\nmaxAge: 1h\n", "appears twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(valid, tt.old) {
				t.Fatalf("no %q in the document", tt.old)
			}
			_, err := evidence.ParseTrust([]byte(strings.Replace(valid, tt.old, tt.new, 1)), dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	// Semantic and schema problems come back as a *ValidationError.
	_, err := evidence.ParseTrust([]byte(strings.Replace(valid, "publicKey: issuer.pub", "publicKey: nothere.pub", 1)), dir)
	var verr *evidence.ValidationError
	if !errors.As(err, &verr) || len(verr.Problems) != 1 || verr.Problems[0].Fix == "" {
		t.Fatalf("err = %#v", err)
	}
}

func TestLoadTrustRefusesFifo(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "trust.yaml")
	if err := mkfifo(p); err != nil {
		t.Skip("mkfifo:", err)
	}
	if _, err := evidence.LoadTrust(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v", err)
	}
}

func mkfifo(p string) error { return unix.Mkfifo(p, 0o600) }
