package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// configLoader loads a minimal valid config with extra YAML appended.
func configLoader(t *testing.T) func(extra string) (*Config, error) {
	dir := t.TempDir()
	base := fmt.Sprintf("policy: %[1]s/p.yaml\ncontrolSocket: %[1]s/c.sock\nsubmitSocket: %[1]s/s.sock\noperators: [0]\nrunner: {stateDir: %[1]s/state}\n", dir)
	return func(extra string) (*Config, error) {
		p := filepath.Join(dir, "custodyd.yaml")
		if err := os.WriteFile(p, []byte(base+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return loadConfig(p)
	}
}

// TestBackendsConfig: backends lists oci first and vm only with a vm
// section pinning each artifact by absolute path and sha256; anything else
// is refused at load, naming the fix.
func TestBackendsConfig(t *testing.T) {
	load := configLoader(t)
	sum := strings.Repeat("a", 64)
	pin := func(p string) string { return fmt.Sprintf("{path: %s, sha256: %s}", p, sum) }
	// The stage's path defaults to beside the init; its digest is pinned.
	vmSection := fmt.Sprintf("vm: {qemu: %s, kernel: %s, modules: %s, init: %s, stage: {sha256: %s}}\n", pin("/usr/bin/qemu-system-x86_64"), pin("/k/vmlinux"), pin("/k/modules"), pin("/bin/custody-vminit"), sum)
	withIDs := "backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", uid: 3000000, gid: 3000000, uids: 16}\n", 1)
	for _, ok := range []string{"", "backends: [oci]\n", "backends: [oci, vm]\n" + vmSection, withIDs} {
		if c, err := load(ok); err != nil {
			t.Errorf("refused %q: %v", ok, err)
		} else if strings.Contains(ok, "vm:") && (c.VM == nil || c.VM.Init.Path != "/bin/custody-vminit") {
			t.Errorf("vm section not read: %+v", c.VM)
		}
	}
	for bad, want := range map[string]string{
		"backends: [oci, vm]\n":             "no vm section",
		"backends: [vm, oci]\n" + vmSection: "oci comes first",
		"backends: [oci, oci]\n":            "twice",
		"backends: [oci, kube]\n":           "not a backend",
		vmSection:                           "backends: [oci, vm]",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "/k/vmlinux", "k/vmlinux", 1):           "absolute",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, sum, "abc", 1):                          "64 lowercase hex",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, ", stage: {sha256: "+sum+"}", "", 1):    "vm.stage.sha256",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "stage: {", "stage: {path: stage, ", 1): "vm.stage.path",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", accel: fast}\n", 1):           "accel",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", extra: 1}\n", 1):              "extra",
		// A uid alone would run QEMU in root's group (gid 0).
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", uid: 3000000}\n", 1):     "vm.gid",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", uid: 10, gid: 10}\n", 1): "range",
	} {
		if _, err := load(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a refusal saying %q", bad, err, want)
		}
	}
}
