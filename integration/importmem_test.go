package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/image/imagetest"
)

// TestHostileImportMemory imports, through the real custodyd, small
// rootfs tar.xz files that unpack to many MiB of zeros and whose headers
// ask for a large decoder dictionary, and reports custodyd's resident
// memory before, at its peak during and after each import: one asking for
// more than the bound (256 MiB) is refused before the decoder allocates
// it, naming the bound and the fix; one asking for 128 MiB, the bound,
// imports. Either way custodyd's own peak and resident size stay within
// 64 MiB of where they were: the file is read by a helper process, whose
// memory goes back with it.
func TestHostileImportMemory(t *testing.T) {
	e := startDaemon(t)
	pid := e.d.Pid()
	dir := t.TempDir()
	over := imagetest.ZerosTarXZ(t, dir, "over.tar.xz", 200<<20, imagetest.DictProp(28))
	within := imagetest.ZerosTarXZ(t, dir, "within.tar.xz", 160<<20, imagetest.DictProp(27))
	const bound = 64 << 10 // KiB
	for _, c := range []struct {
		path string
		ok   bool
	}{{within, true}, {over, false}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		// Reset the peak ("5" to clear_refs), so VmHWM is this import's.
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			t.Fatal(err)
		}
		before := vmKiB(t, pid, "VmRSS")
		code, out, errs := e.custody("image", "import", c.path)
		peak, after := vmKiB(t, pid, "VmHWM"), vmKiB(t, pid, "VmRSS")
		t.Logf("%s (%d KiB): custodyd RSS before %d MiB, peak during %d MiB, after %d MiB; exit %d",
			fi.Name(), fi.Size()>>10, before>>10, peak>>10, after>>10, code)
		switch {
		case c.ok && code != exitOK:
			t.Errorf("%s: exit %d: %s %s", fi.Name(), code, out, errs)
		case !c.ok && (code == exitOK || !strings.Contains(errs, "128 MiB") || !strings.Contains(errs, "fix:")):
			t.Errorf("%s: exit %d, want a refusal naming the 128 MiB bound and the fix: %s %s", fi.Name(), code, out, errs)
		}
		if peak-before > bound || after-before > bound {
			t.Errorf("%s: custodyd's RSS went from %d MiB to a peak of %d MiB, %d MiB after: more than %d MiB for one import",
				fi.Name(), before>>10, peak>>10, after>>10, bound>>10)
		}
	}
}

// vmKiB reads a field of /proc/PID/status given in kB.
func vmKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
