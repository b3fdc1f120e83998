package qualification

import (
	"strings"
	"testing"
)

// TestVMSection: custodyd's vm section is taken as it is; anything else
// (another key, more than one document, not a mapping, too large) is
// refused before a daemon is started.
func TestVMSection(t *testing.T) {
	good := "vm:\n  qemu: {path: /usr/bin/qemu-system-x86_64, sha256: aa}\n  accel: tcg\n"
	out, err := vmSection([]byte(good))
	if err != nil || !strings.HasPrefix(out, "vm:\n") || !strings.Contains(out, "accel: tcg") {
		t.Fatalf("vmSection(good) = %q, %v", out, err)
	}
	for name, bad := range map[string]string{
		"another key":     "vm: {accel: tcg}\nrunner: {stateDir: /x}\n",
		"not vm":          "runner: {stateDir: /x}\n",
		"two documents":   "vm: {accel: tcg}\n---\nvm: {accel: kvm}\n",
		"vm not a map":    "vm: [a, b]\n",
		"empty":           "",
		"not yaml":        "vm: {accel: [\n",
		"too large":       "vm: {accel: " + strings.Repeat("x", maxVMConfig) + "}\n",
		"top level list":  "- vm\n",
		"backends within": "backends: [oci, vm]\n",
	} {
		if _, err := vmSection([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzVMSection(f *testing.F) {
	f.Add([]byte("vm:\n  qemu: {path: /usr/bin/qemu-system-x86_64, sha256: aa}\n  accel: tcg\n"))
	f.Add([]byte("vm: {accel: tcg}\n---\nvm: {}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := vmSection(data)
		if err != nil {
			return
		}
		// What it accepts it accepts again, unchanged in meaning.
		again, err := vmSection([]byte(out))
		if err != nil || again != out {
			t.Fatalf("re-encoding %q: %q, %v", out, again, err)
		}
	})
}
