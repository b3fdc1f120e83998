package platform

import (
	"context"
	"os/exec"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestSealedImagesCheck: on this host (root, mkfs.erofs, a kernel with
// file-backed erofs) the check is ok; without mkfs.erofs on PATH it warns,
// naming the package to install.
func TestSealedImagesCheck(t *testing.T) {
	testenv.Root(t)
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testenv.Missing(t, "mkfs.erofs (erofs-utils)")
	}
	if c := SealedImagesCheck(context.Background()); c.Verdict != VerdictOK {
		t.Fatalf("SealedImagesCheck = %+v", c)
	}
	t.Setenv("PATH", t.TempDir())
	if c := SealedImagesCheck(context.Background()); c.Verdict != VerdictWarn || c.Fix == "" {
		t.Fatalf("without mkfs.erofs: %+v", c)
	}
}
