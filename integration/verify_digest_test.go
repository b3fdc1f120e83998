package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDigestReproducesTheReceipt: custody digest of an input's source
// prints the digest the receipt records for it, so a reviewer can check a
// receipt's inputs from the files alone; a path that is not there is
// refused.
func TestDigestReproducesTheReceipt(t *testing.T) {
	e := startDaemon(t)
	src := filepath.Join(e.dir, "in", "src")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "a.txt"), "alpha\n")
	write(t, filepath.Join(src, "sub", "b.txt"), "beta\n")
	g := e.grant(t, e.phase(t, "digest", "cat /in/a.txt > /out/seen", "inputs:\n  - {source: "+src+", target: /in}\n"))
	receipt := filepath.Join(e.dir, "out", "receipt.json")
	if code, _, errs := e.custody("run", "--grant", g, "--receipt", receipt); code != exitOK {
		t.Fatalf("run: %d %s", code, errs)
	}
	trust := e.trust(t, "trust.yaml", "development")
	code, out, errs := e.custody("verify", receipt, "--trust", trust, "--outputs", filepath.Join(e.dir, "out", "outputs"))
	if code != verifyPromotable {
		t.Fatalf("verify: %d\n%s%s", code, out, errs)
	}
	var recorded string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "input" && f[1] == "/in" && f[4] == src {
			recorded = f[2]
		}
	}
	if recorded == "" {
		t.Fatalf("verify prints no input line for %s:\n%s", src, out)
	}
	code, out, errs = e.custody("digest", src, "--target", "/in")
	if code != exitOK || !strings.HasPrefix(out, recorded+"  ") {
		t.Fatalf("custody digest %s: exit %d, want %s first:\n%s%s", src, code, recorded, out, errs)
	}
	if code, out, errs := e.custody("digest", filepath.Join(e.dir, "absent")); code != exitRefused || out != "" {
		t.Fatalf("digest of a missing path: exit %d\n%s%s", code, out, errs)
	}
}
