package bench_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/internal/testenv"
)

// The agent-loop row's footing against a real custodyd: the bench policy
// lets the submit socket mint a test run under the standing authorization,
// its receipt verifies in process and names the authorization; a receipt
// altered after signing, or checked against another issuer, does not.
func TestLoopAuthorizationReceipt(t *testing.T) {
	testenv.Root(t)
	custodyd := os.Getenv("CUSTODYD_BIN")
	if custodyd == "" {
		testenv.Missing(t, "CUSTODYD_BIN (bin/custodyd, make build)")
	}
	runc, _, _ := testenv.Runc(t)
	rootfs := testenv.BusyboxRootfs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The remapped container root must traverse to the bundles, which
	// t.TempDir's private parent forbids.
	dir, err := os.MkdirTemp("", "custody-loop-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	d, err := bench.StartDaemon(ctx, bench.DaemonOptions{Custodyd: custodyd, Runtime: runc, Rootfs: rootfs, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	})
	repo := filepath.Join(dir, "work", "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "test.sh"), []byte("echo passed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	phase := fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: loop\nstage: test\ntier: development\nimage: %q\n"+
		"command: [\"/bin/sh\", \"/in/test.sh\"]\ninputs:\n  - {source: %q, target: /in}\noutput:\n  path: /out\nresources:\n  memory: 64Mi\n  pids: 64\n  wallTime: 30s\n", d.Image, repo)
	var out bytes.Buffer
	res, rcpt, err := d.Submit.RunAuthorized(ctx, bench.LoopAuthorization, api.PhaseSource{YAML: []byte(phase), BaseDir: dir}, &out, io.Discard, nil)
	if err != nil {
		t.Fatalf("run under %s: %v\n%s", bench.LoopAuthorization, err, d.LogTail(20))
	}
	if res.Status != api.StatusOK || !strings.Contains(out.String(), "passed") || rcpt == nil {
		t.Fatalf("run %s: status %s, exit %d, stdout %q, receipt %v", res.RunID, res.Status, res.ExitCode, out.String(), rcpt != nil)
	}
	issuer, err := d.IssuerPublicKey()
	if err != nil {
		t.Fatal(err)
	}
	rv, err := bench.NewReceiptVerifier(rcpt, issuer)
	if err != nil {
		t.Fatal(err)
	}
	check, outputs, err := rv.For(res)
	if err != nil {
		t.Fatal(err)
	}
	got, err := check(ctx, rcpt)
	if err != nil {
		t.Fatalf("the minted run's receipt: %v", err)
	}
	if !outputs {
		t.Error("the output tree was not re-hashed: the run's retained outputs should be on this host")
	}
	if got.Authorization == nil || got.Authorization.Name != bench.LoopAuthorization {
		t.Fatalf("the verified receipt names authorization %+v, want %s", got.Authorization, bench.LoopAuthorization)
	}

	// Refusals: one byte of the signed envelope changed; an issuer key
	// that did not sign the grant; no receipt at all.
	bad := *rcpt
	bad.Envelope = bytes.Clone(rcpt.Envelope)
	i := bytes.Index(bad.Envelope, []byte(`"payload":"`))
	if i < 0 {
		t.Fatalf("no payload in the envelope %s", rcpt.Envelope)
	}
	// A base64 character of the payload for another: still decodes, no
	// longer what was signed.
	i += len(`"payload":"`) + 8
	bad.Envelope[i] = map[bool]byte{true: 'B', false: 'A'}[bad.Envelope[i] == 'A']
	if _, err := check(ctx, &bad); err == nil {
		t.Error("an altered receipt verified")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := bench.NewReceiptVerifier(rcpt, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	ocheck, _, err := other.For(res)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ocheck(ctx, rcpt); err == nil {
		t.Error("a receipt verified against an issuer that did not sign its grant")
	}
	if _, err := check(ctx, nil); err == nil {
		t.Error("a missing receipt verified")
	}
}
