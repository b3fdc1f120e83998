package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
)

// grantIDOf reads a grant file's id.
func grantIDOf(t *testing.T, path string) string {
	t.Helper()
	var st struct{ Predicate struct{ ID string } }
	if err := json.Unmarshal(payloadOfEnvelope(t, readBytes(t, path)), &st); err != nil || st.Predicate.ID == "" {
		t.Fatalf("grant %s: %v", path, err)
	}
	return st.Predicate.ID
}

// TestRevokeAndOpLog: custody revoke grant and custody revoke key are the
// one revocation command, each recorded in the runner's signed operations
// log, which custody oplog prints after checking every line (against the
// runner's keys, and against an exported trust file). A revoked grant
// never launches; a revoked retired issuer key ends its overlap, so a
// grant it signed before the rotation, which would still launch, is
// refused. Refusals: revoking the current key (rotate first), an unknown
// key, a non-operator, a log with a line changed, which custody oplog
// refuses naming the line, and a log cut at a line boundary, which its
// signed head shows. custody trust export marks the revoked key with
// its revokedAt.
func TestRevokeAndOpLog(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "revoke", "true", "")
	g := e.grant(t, phase)
	gid := grantIDOf(t, g)
	if code, out, errs := e.custody("revoke", "grant", gid, "--reason", "sent to the wrong agent"); code != exitOK || !strings.Contains(out, "revoked grant") {
		t.Fatalf("revoke grant: %d %s %s", code, out, errs)
	}
	if code, _, errs := e.custody("run", "--grant", g); code != exitRefused || !strings.Contains(errs, "revoked") {
		t.Fatalf("a revoked grant ran: %d %s", code, errs)
	}

	// A grant of the issuer key about to be retired; then the rotation.
	early := filepath.Join(e.dir, "early.grant.json")
	if err := os.Rename(e.grant(t, phase), early); err != nil {
		t.Fatal(err)
	}
	status := func() map[string]any {
		t.Helper()
		code, out, _ := e.custody("status", "--json")
		var st struct{ Status map[string]any }
		if code != exitOK || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("status: %d %s", code, out)
		}
		return st.Status
	}
	oldIssuer := status()["issuerId"].(string)
	e.d.Stop()
	if out, err := e.d.Command(context.Background(), "--rotate-key", "issuer").CombinedOutput(); err != nil {
		t.Fatalf("rotate: %v %s", err, out)
	}
	e.d.Start()
	newIssuer := status()["issuerId"].(string)
	if code, _, errs := e.custody("revoke", "key", "issuer", newIssuer); code != exitRefused || !strings.Contains(errs, "--rotate-key issuer") {
		t.Fatalf("revoking the current key: %d %s", code, errs)
	}
	if code, _, errs := e.custody("revoke", "key", "issuer", "sha256:"+strings.Repeat("0", 64)); code == exitOK {
		t.Fatalf("revoking an unknown key: %d %s", code, errs)
	}
	if code, _, errs := e.custody("revoke", "key", "issuer", oldIssuer, "--at", "yesterday"); code != exitUsage {
		t.Fatalf("--at yesterday: %d %s", code, errs)
	}
	if code, out, errs := e.custody("revoke", "key", "issuer", oldIssuer, "--reason", "laptop stolen"); code != exitOK {
		t.Fatalf("revoke the retired issuer key: %d %s %s", code, out, errs)
	}
	if code, _, errs := e.custody("run", "--grant", early); code != exitRefused || !strings.Contains(errs, "not by a trusted issuer") {
		t.Fatalf("a grant of the revoked retired issuer key: %d %s", code, errs)
	}
	// The revocation holds across a restart (read back from the log).
	e.d.Stop()
	e.d.Start()
	if code, _, errs := e.custody("run", "--grant", early); code != exitRefused {
		t.Fatalf("after a restart, a grant of the revoked key: %d %s", code, errs)
	}

	// custody status --operator publishes the head a reviewer keeps.
	if code, out, _ := e.custody("status", "--operator"); code != exitOK || !strings.Contains(out, `"opLog": {`) || !strings.Contains(out, `"seq": 2`) {
		t.Fatalf("status --operator does not show the operations log's head at seq 2: %d %s", code, out)
	} else if err := valid(t, "status", out); err != nil {
		t.Fatalf("status --operator with the head against status.schema.json: %v\n%s", err, out)
	}
	code, out, errs := e.custody("oplog", "--json")
	var log struct {
		Entries []struct {
			Seq    int
			Kind   string
			Grant  string
			Reason string
			Key    *struct{ Name, ID string }
		}
	}
	jerr := json.Unmarshal([]byte(out), &log)
	if code != exitOK || jerr != nil || len(log.Entries) != 2 ||
		log.Entries[0].Kind != "grant-revoked" || log.Entries[0].Grant != gid || log.Entries[0].Reason != "sent to the wrong agent" ||
		log.Entries[1].Kind != "key-revoked" || log.Entries[1].Key == nil || log.Entries[1].Key.ID != oldIssuer {
		t.Fatalf("oplog --json: %d %v %s %s", code, jerr, out, errs)
	}
	code, trust, errs := e.custody("trust", "export")
	if code != exitOK {
		t.Fatalf("trust export: %d %s", code, errs)
	}
	if strings.Count(trust, "revokedAt:") != 1 {
		t.Fatalf("trust export does not mark the revoked issuer key:\n%s", trust)
	}
	trustPath := filepath.Join(e.dir, "exported-trust.yaml")
	write(t, trustPath, trust)
	if code, out, errs := e.custody("oplog", "--trust", trustPath); code != exitOK || !strings.Contains(out, "key-revoked") || !strings.Contains(errs, "signed and chained") {
		t.Fatalf("oplog --trust: %d %s %s", code, out, errs)
	}

	// Refusals: a changed line; the submit socket.
	path := filepath.Join(e.dir, "state", "oplog.jsonl")
	data := readBytes(t, path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), "laptop stolen", "laptop found", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := e.custody("oplog", "--trust", trustPath); code != exitRefused || !strings.Contains(errs, "line 2") {
		t.Fatalf("oplog of a changed log: %d %s", code, errs)
	}
	// custodyd itself no longer vouches for its keys on a broken log.
	if code, _, errs := e.custody("trust", "export"); code == exitOK || !strings.Contains(errs, "line 2") {
		t.Fatalf("trust export on a changed log: %d %s", code, errs)
	}
	// A log cut at a line boundary: every line left verifies, its signed
	// head does not match.
	first := data[:strings.IndexByte(string(data), '\n')+1]
	if err := os.WriteFile(path, first, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := e.custody("oplog", "--trust", trustPath); code != exitRefused || !strings.Contains(errs, "cut off") {
		t.Fatalf("oplog of a log cut short: %d %s", code, errs)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := e.custody("--control", e.submit, "oplog"); code == exitOK {
		t.Fatal("the submit socket served the operations log")
	}
}

// TestRevokeGrantSaysWhatHolds: custody revoke grant refuses an id this
// runner never issued (exit 2, naming it) and a grant already spent
// (exit 2, naming the run that spent it: a revocation would stop
// nothing), and records neither in the operations log; an issued, unspent
// grant is revoked and recorded once, and revoking it again records no
// second line.
func TestRevokeGrantSaysWhatHolds(t *testing.T) {
	e := startDaemon(t)
	path := filepath.Join(e.dir, "state", "oplog.jsonl")
	lines := func() int {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	if code, out, errs := e.custody("revoke", "grant", "g-never-issued"); code != exitRefused || strings.Contains(out, "revoked") || !strings.Contains(errs, "never issued") {
		t.Fatalf("revoke a never-issued id: %d %s %s", code, out, errs)
	}
	phase := e.phase(t, "revoke-spent", "true", "")
	spent := e.grant(t, phase)
	if code, _, errs := e.custody("run", "--grant", spent); code != exitOK {
		t.Fatalf("run: %d %s", code, errs)
	}
	if code, out, errs := e.custody("revoke", "grant", grantIDOf(t, spent)); code != exitRefused || strings.Contains(out, "revoked") || !strings.Contains(errs, "already spent") || !strings.Contains(errs, "run ") {
		t.Fatalf("revoke a spent grant: %d %s %s", code, out, errs)
	}
	if n := lines(); n != 0 {
		t.Fatalf("refused revocations wrote %d operations-log lines", n)
	}
	live := grantIDOf(t, e.grant(t, phase))
	for i := 0; i < 2; i++ {
		if code, out, errs := e.custody("revoke", "grant", live); code != exitOK || !strings.Contains(out, "revoked grant") {
			t.Fatalf("revoke an issued grant (%d): %d %s %s", i, code, out, errs)
		}
	}
	if n := lines(); n != 1 {
		t.Fatalf("two revocations of one grant wrote %d lines, want 1", n)
	}
}

// TestRevokeForeignGrant: a grant another issuer signed, one this runner
// trusts (trustedIssuers), has no issue record here: revoking it by id
// alone is refused as never issued, and with its file (--grant-file),
// whose signature shows it exists, it is revoked and then refused at
// launch. Another grant's file, or one of an untrusted issuer, is refused.
func TestRevokeForeignGrant(t *testing.T) {
	foreign, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(t.TempDir(), "foreign-issuer.pub")
	write(t, pub, string(foreign.PublicPEM()))
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{Config: "trustedIssuers: [" + pub + "]\n"})
	phase := e.phase(t, "foreign", "true", "")
	mint := func(signer *keys.Signer, id string) (string, string) {
		t.Helper()
		var st struct{ Predicate grant.Predicate }
		if err := json.Unmarshal(payloadOfEnvelope(t, readBytes(t, e.grant(t, phase))), &st); err != nil {
			t.Fatal(err)
		}
		st.Predicate.ID = id
		env, err := grant.Mint(context.Background(), signer, st.Predicate)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(e.dir, id+".grant.json")
		write(t, p, string(env))
		return p, id
	}
	file, id := mint(foreign, "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0")
	other, _ := mint(foreign, "e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1")
	stranger, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	untrusted, _ := mint(stranger, "d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2")
	if code, _, errs := e.custody("revoke", "grant", id); code != exitRefused || !strings.Contains(errs, "--grant-file") {
		t.Fatalf("a foreign grant by id alone: %d %s", code, errs)
	}
	for name, f := range map[string]string{"another grant's file": other, "an untrusted issuer's grant": untrusted} {
		if code, out, errs := e.custody("revoke", "grant", id, "--grant-file", f); code != exitRefused || strings.Contains(out, "revoked") {
			t.Errorf("%s: %d %s %s", name, code, out, errs)
		}
	}
	if code, out, errs := e.custody("revoke", "grant", id, "--grant-file", file, "--reason", "its issuer's key leaked"); code != exitOK || !strings.Contains(out, "revoked grant") {
		t.Fatalf("a foreign grant with its file: %d %s %s", code, out, errs)
	}
	if code, _, errs := e.custody("run", "--grant", file); code != exitRefused || !strings.Contains(errs, "revoked") {
		t.Fatalf("the revoked foreign grant ran: %d %s", code, errs)
	}
}
