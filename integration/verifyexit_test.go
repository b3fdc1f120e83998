package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// copyTree copies the regular files of src into a new dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestVerifyPromoteExitTable: custody verify and custody promote give
// one exit code per verdict, as the operations guide's table says:
// 0 promotable; 1 authentic but not promotable (a development receipt
// under a production trust file, a failed run); 2 not authentic (the
// retained bytes changed, a file added or missing, a receipt whose
// signature is broken); 64 a usage error. promote, which signs only what
// verify calls promotable, exits as verify does, and with --bundle writes
// its VSA as a Sigstore bundle v0.3 too, which the pinned cosign verifies
// with the verifier's key (and refuses once changed).
func TestVerifyPromoteExitTable(t *testing.T) {
	e := startDaemon(t)
	dev := e.trust(t, "trust-dev.yaml", "development")
	prod := e.trust(t, "trust-prod.yaml", "production")
	out := filepath.Join(e.dir, "ok")
	if code, _, errs := e.custody("run", "--grant", e.grant(t, e.phase(t, "table", "echo built > /out/a.txt; echo two > /out/b.txt", "")), "--receipt", filepath.Join(out, "receipt.json")); code != exitOK {
		t.Fatalf("run: %d %s", code, errs)
	}
	receipt, outputs := filepath.Join(out, "receipt.json"), filepath.Join(out, "outputs")
	fout := filepath.Join(e.dir, "failed")
	if code, _, errs := e.custody("run", "--grant", e.grant(t, e.phase(t, "failing", "echo p > /out/p; exit 3", "")), "--receipt", filepath.Join(fout, "receipt.json")); code != exitFailed {
		t.Fatalf("failing run: %d %s", code, errs)
	}
	variant := func(name string, change func(dir string)) string {
		dir := filepath.Join(e.dir, name)
		copyTree(t, outputs, dir)
		change(dir)
		return dir
	}
	changed := variant("changed", func(d string) { write(t, filepath.Join(d, "a.txt"), "tampered\n") })
	added := variant("added", func(d string) { write(t, filepath.Join(d, "extra.txt"), "more\n") })
	missing := variant("missing", func(d string) {
		if err := os.Remove(filepath.Join(d, "b.txt")); err != nil {
			t.Fatal(err)
		}
	})
	broken := filepath.Join(e.dir, "broken.json")
	raw := readBytes(t, receipt)
	i := strings.Index(string(raw), `"sig":"`) + len(`"sig":"`) + 4
	raw[i] ^= 0x01
	write(t, broken, string(raw))

	key := filepath.Join(e.dir, "verifier.key")
	for _, c := range []struct {
		what             string
		receipt, outputs string
		trust            string
		want             int
	}{
		{"promotable", receipt, outputs, dev, 0},
		{"a development receipt under a production trust file", receipt, outputs, prod, 1},
		{"a failed run", filepath.Join(fout, "receipt.json"), filepath.Join(fout, "outputs"), dev, 1},
		{"a changed output", receipt, changed, dev, 2},
		{"an added output", receipt, added, dev, 2},
		{"a missing output", receipt, missing, dev, 2},
		{"a broken signature", broken, outputs, dev, 2},
	} {
		code, stdout, errs := e.custody("verify", c.receipt, "--trust", c.trust, "--outputs", c.outputs)
		if code != c.want {
			t.Errorf("verify, %s: exit %d, want %d\n%s%s", c.what, code, c.want, stdout, errs)
		}
		if c.want == 0 {
			continue // promoted below, with its bundle
		}
		if code, stdout, errs := e.custody("promote", c.receipt, "--trust", c.trust, "--outputs", c.outputs, "--key", key); code != c.want || stdout != "" {
			t.Errorf("promote, %s: exit %d, want %d, and no VSA\n%s%s", c.what, code, c.want, stdout, errs)
		}
	}
	if code, _, _ := e.custody("verify", receipt, "--trust", dev); code != exitUsage {
		t.Errorf("verify without --outputs: exit %d, want %d", code, exitUsage)
	}

	bundle := filepath.Join(e.dir, "vsa", "vsa.sigstore.json")
	code, vsa, errs := e.custody("promote", receipt, "--trust", dev, "--outputs", outputs, "--key", key, "--bundle", bundle)
	if code != 0 || !strings.Contains(vsa, `"payloadType"`) {
		t.Fatalf("promote --bundle: %d %s %s", code, vsa, errs)
	}
	if code, _, _ := e.custody("promote", receipt, "--trust", dev, "--outputs", outputs, "--key", key, "--bundle", bundle); code != exitRefused {
		t.Fatalf("promote --bundle over an existing bundle: exit %d, want %d", code, exitRefused)
	}
	cosign := os.Getenv("CUSTODY_COSIGN")
	if cosign == "" {
		testenv.Missing(t, "cosign ($CUSTODY_COSIGN, built by make bin/cosign)")
	}
	verify := func(b string) (string, error) {
		out, err := exec.Command(cosign, "verify-blob-attestation", "--key", filepath.Join(e.dir, "verifier.pub"), "--bundle", b,
			"--type", "https://slsa.dev/verification_summary/v1", "--insecure-ignore-tlog", filepath.Join(outputs, "a.txt")).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(bundle); err != nil {
		t.Fatalf("cosign refused the VSA bundle: %v %s", err, out)
	}
	tampered := filepath.Join(e.dir, "vsa", "tampered.sigstore.json")
	b := readBytes(t, bundle)
	j := strings.Index(string(b), `"payload": "`) + len(`"payload": "`) + 40
	b[j] ^= 0x01
	write(t, tampered, string(b))
	if out, err := verify(tampered); err == nil {
		t.Fatalf("cosign accepted a changed VSA bundle: %s", out)
	}
}
