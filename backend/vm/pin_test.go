package vm_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/backend/vm/vmpin"
)

// TestPinProbeIsTheBackendsIdentity: custody gate describes the vm
// runtime with vmpin.Probe, without a backend; on the same pins it gives
// the identity the backend reports, so a row the daemon signed matches the
// gate's platform. A tampered pin and a uid without its gid are refused,
// as the backend refuses them.
func TestPinProbeIsTheBackendsIdentity(t *testing.T) {
	ctx := context.Background()
	opts := pins(t)
	opts.Accel = "tcg"
	opts.RuntimeDir = filepath.Join(t.TempDir(), "vm")
	b, err := vm.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := vm.Config{QEMU: opts.QEMU, Kernel: opts.Kernel, Modules: opts.Modules, Init: opts.Init, Stage: opts.Stage, Accel: "tcg"}
	rt, err := vmpin.Probe(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := b.Identity()
	if rt.Path != id.Path || rt.SHA256 != id.SHA256 || rt.Version != id.Version {
		t.Fatalf("probe %+v, backend %+v", rt, id)
	}
	if !strings.Contains(rt.Version, "accel tcg") || !strings.Contains(rt.Version, opts.Kernel.SHA256) {
		t.Fatalf("version %q does not name the accelerator and the kernel", rt.Version)
	}

	tampered := cfg
	tampered.Kernel.SHA256 = strings.Repeat("0", 64)
	if _, err := vmpin.Probe(ctx, tampered, nil); !errors.Is(err, vmpin.ErrTampered) {
		t.Fatalf("a tampered kernel pin: %v, want ErrTampered", err)
	}
	noGID := cfg
	noGID.UID = vm.DefaultUID + 9000
	if _, err := vmpin.Probe(ctx, noGID, nil); !errors.Is(err, vmpin.ErrConfig) {
		t.Fatalf("a uid without a gid: %v, want ErrConfig", err)
	}
}
