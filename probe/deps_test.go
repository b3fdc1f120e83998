package probe

import (
	"github.com/custody-dev/custody/internal/testenv"
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly keeps the probe (package and binary) free of any
// dependency outside the standard library, so that it builds static and
// small, with CGO_ENABLED=0.
func TestStandardLibraryOnly(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "the go tool on PATH (to list the probe's dependencies)")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/custody-dev/custody/cmd/custody-probe").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/custody-dev/custody/probe", "github.com/custody-dev/custody/cmd/custody-probe",
			"github.com/custody-dev/custody/internal/procfs":
		default:
			t.Errorf("the probe depends on %s; it must use the standard library only", dep)
		}
	}
}
