package vm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/backend/vm/vmpin"
	"github.com/custody-dev/custody/internal/testenv"
)

// pins are the real artifacts the tests boot (testenv.VM), pinned as
// they are now.
func pins(t testing.TB) vm.Options {
	t.Helper()
	a := testenv.VM(t)
	opts := vm.Options{}
	for _, p := range []struct {
		dst  *vm.Pinned
		path string
	}{{&opts.QEMU, a.QEMU}, {&opts.Kernel, a.Kernel}, {&opts.Init, a.Init}, {&opts.Stage, a.Stage}} {
		sum, err := vmpin.FileSHA256(p.path)
		if err != nil {
			t.Fatal(err)
		}
		*p.dst = vm.Pinned{Path: p.path, SHA256: sum}
	}
	sum, err := vmpin.ModulesDigest(a.Modules)
	if err != nil {
		t.Fatal(err)
	}
	opts.Modules = vm.Pinned{Path: a.Modules, SHA256: sum}
	// The workload's filter is the oci profile's, as custodyd wires it.
	filter, err := oci.CompileFilter()
	if err != nil {
		t.Fatal(err)
	}
	opts.SeccompFilter = filter.Program
	return opts
}

var accel struct {
	once sync.Once
	name string
	err  error
}

// newBackend makes a backend on private directories; the accelerator is
// probed once per test binary.
func newBackend(t testing.TB, opts vm.Options) *vm.Backend {
	t.Helper()
	accel.once.Do(func() {
		probe := opts
		probe.RuntimeDir = filepath.Join(os.TempDir(), "custody-vm-probe")
		b, err := vm.New(context.Background(), probe)
		if err != nil {
			accel.err = err
			return
		}
		accel.name = b.Accel()
		os.RemoveAll(probe.RuntimeDir)
	})
	if accel.err != nil {
		t.Fatal(accel.err)
	}
	opts.Accel = accel.name
	opts.RuntimeDir = filepath.Join(t.TempDir(), "vm")
	b, err := vm.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func spec(t testing.TB, rootfs string, args ...string) backend.Spec {
	return backend.Spec{
		Rootfs: rootfs, Args: args, Env: []string{"PATH=/bin"}, Cwd: "/", Hostname: "guest",
		OutputPath: "/out", OutputBytes: 4 << 20, OutputFiles: 64, TmpBytes: 8 << 20,
		Memory: 64 << 20, Pids: 64, CPU: 1, FileSize: 4 << 20,
	}
}

// TestBackendContract runs the one suite of the backend contract against
// real QEMU guests.
func TestBackendContract(t *testing.T) {
	opts := pins(t)
	rootfs := testenv.BusyboxRootfs(t)
	backendtest.Suite(t, func(t *testing.T) backendtest.Fixture {
		b := newBackend(t, opts)
		return backendtest.Fixture{Backend: b, Spec: func(args ...string) backend.Spec { return spec(t, rootfs, args...) }}
	})
}

// run prepares and runs one launch and cleans it up, verified.
func run(t *testing.T, b *vm.Backend, s backend.Spec, wall time.Duration) (*backend.Exit, string, string, map[string][]byte) {
	t.Helper()
	ex, stdout, stderr, files, _ := runTimed(t, b, s, wall)
	return ex, stdout, stderr, files
}

// runTimed is run that also returns the machine's timing.
func runTimed(t *testing.T, b *vm.Backend, s backend.Spec, wall time.Duration) (*backend.Exit, string, string, map[string][]byte, vm.Timing) {
	t.Helper()
	ctx := context.Background()
	id := "t-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(id) > 60 {
		id = id[len(id)-60:]
		id = "t" + strings.TrimLeft(id, "-")
	}
	sb, err := b.Prepare(ctx, id, s, partial.Nop{})
	if err != nil {
		if sb != nil {
			sb.Cleanup(ctx)
		}
		t.Fatalf("prepare: %v", err)
	}
	defer func() {
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup not verified: %+v", rep.Steps)
		}
	}()
	var stdout, stderr bytes.Buffer
	ex, err := sb.Run(ctx, wall, backend.IO{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	files := map[string][]byte{}
	_ = filepath.Walk(sb.Output().Dir(), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			rel, _ := filepath.Rel(sb.Output().Dir(), p)
			files[rel], _ = os.ReadFile(p)
		}
		return nil
	})
	tm := sb.(*vm.Machine).Timing()
	t.Logf("timing %+v", tm)
	checkHostUsage(t, b, id, s, ex)
	return ex, stdout.String(), stderr.String(), files, tm
}

// checkHostUsage: where the host has the hierarchies, QEMU ran in its own
// host cgroups, within their limit, and the usage the receipt asserts is
// exactly what those cgroups accounted, read here before cleanup removes
// them; the guest's own figures are only a note in the observation.
func checkHostUsage(t *testing.T, b *vm.Backend, id string, s backend.Spec, ex *backend.Exit) {
	t.Helper()
	if len(b.Capabilities().Tiers["development"]) != 0 {
		t.Logf("no host cgroup hierarchies for QEMU: usage %+v", ex.Usage)
		return
	}
	rs, err := b.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return string(data)
	}
	peak, oom, cpu := "", "", ""
	for _, r := range rs {
		if r.Kind != vm.KindCgroup {
			continue
		}
		if v := read(filepath.Join(r.Name, "memory.max_usage_in_bytes")); v != "" {
			peak = strings.TrimSpace(v)
			oom = lines([]byte(strings.ReplaceAll(read(filepath.Join(r.Name, "memory.oom_control")), " ", "=")))["oom_kill"]
		}
		if v := read(filepath.Join(r.Name, "cpuacct.usage")); v != "" {
			cpu = strings.TrimSpace(v)
		}
	}
	limit := s.Memory + vm.GuestOverheadBytes + vm.QEMUOverheadBytes
	u := ex.Usage
	t.Logf("host cgroup: peak %s, oom_kill %s, cpuacct.usage %s; usage %+v", peak, oom, cpu, u)
	if strconv.FormatInt(u.PeakMemoryBytes, 10) != peak || u.PeakMemoryBytes <= 0 || u.PeakMemoryBytes > limit {
		t.Errorf("usage peak memory %d, QEMU's host cgroup %q: want equal and within (0, %d]", u.PeakMemoryBytes, peak, limit)
	}
	var guestOOM int64
	if ex.Observation != nil {
		for _, n := range ex.Observation.Notes {
			var peak, cpu int64
			if _, err := fmt.Sscanf(n, vm.GuestUsageNote, &peak, &cpu, &guestOOM); err == nil {
				break
			}
		}
	}
	if strconv.FormatInt(u.OOMKills-guestOOM, 10) != oom || ex.OOMKilled != (u.OOMKills > 0) {
		t.Errorf("usage OOM kills %d (OOMKilled %v), QEMU's host cgroup %q", u.OOMKills, ex.OOMKilled, oom)
	}
	if cpu != "" && (strconv.FormatInt(u.CPUTimeNanos, 10) != cpu || u.CPUTimeNanos <= 0) {
		t.Errorf("usage CPU %d ns, QEMU's host cgroup %q ns", u.CPUTimeNanos, cpu)
	}
}

// guestUsage is the guest's claim of what the workload used, from the
// observation's note: peak memory bytes, CPU µs, OOM kills.
func guestUsage(t *testing.T, ex *backend.Exit) (peak, cpu, oom int64) {
	t.Helper()
	if ex.Observation != nil {
		for _, n := range ex.Observation.Notes {
			if _, err := fmt.Sscanf(n, vm.GuestUsageNote, &peak, &cpu, &oom); err == nil {
				return peak, cpu, oom
			}
		}
	}
	t.Fatalf("no note of the guest's usage in the observation %+v", ex.Observation)
	return 0, 0, 0
}

// TestTamperedArtifactsRefused: a kernel, init, workload stage or module
// whose bytes changed since they were pinned is refused at Prepare, before
// anything is created, also after an earlier Prepare verified (and the
// backend kept) the untouched bytes; the untouched pins prepare.
func TestTamperedArtifactsRefused(t *testing.T) {
	opts := pins(t)
	rootfs := testenv.BusyboxRootfs(t)
	for _, which := range []string{"kernel", "init", "stage", "module"} {
		t.Run(which, func(t *testing.T) {
			o := opts
			var src string
			var copyTo string
			switch which {
			case "module":
				// A copy of the module tree, so that one module can change.
				o.Modules.Path = filepath.Join(t.TempDir(), "modules")
				for _, m := range vm.Modules {
					data, err := os.ReadFile(filepath.Join(opts.Modules.Path, m))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.MkdirAll(filepath.Dir(filepath.Join(o.Modules.Path, m)), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(o.Modules.Path, m), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				copyTo = filepath.Join(o.Modules.Path, vm.Modules[0])
				src = copyTo
			default:
				p := map[string]*vm.Pinned{"kernel": &o.Kernel, "init": &o.Init, "stage": &o.Stage}[which]
				src, copyTo = p.Path, filepath.Join(t.TempDir(), which)
				p.Path = copyTo
			}
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(copyTo, data, 0o644); err != nil {
				t.Fatal(err)
			}
			b := newBackend(t, o)
			ctx := context.Background()
			// The untouched pins prepare, and the backend keeps what it
			// verified.
			sb, err := b.Prepare(ctx, "untouched-"+which, spec(t, rootfs, "/bin/true"), partial.Nop{})
			if err != nil {
				t.Fatalf("prepare with the pinned %s: %v", which, err)
			}
			if rep := sb.Cleanup(ctx); !rep.Verified {
				t.Fatalf("cleanup: %+v", rep.Steps)
			}
			// Tamper after that: Prepare re-checks.
			data[len(data)/2] ^= 0xff
			if err := os.WriteFile(copyTo, data, 0o644); err != nil {
				t.Fatal(err)
			}
			sb, err = b.Prepare(ctx, "tamper-"+which, spec(t, rootfs, "/bin/true"), partial.Nop{})
			if !errors.Is(err, vm.ErrTampered) {
				if sb != nil {
					sb.Cleanup(ctx) // what a wrongly admitted prepare made
				}
				t.Fatalf("prepare with a tampered %s: %v, want ErrTampered", which, err)
			}
			if sb != nil {
				t.Error("a refused prepare returned a sandbox")
			}
			if rep := b.VerifyAbsent("tamper-"+which, nil); !rep.Verified {
				t.Errorf("something was created before the refusal: %+v", rep.Steps)
			}
		})
	}
}

// TestAccelProbe: the accelerator probe boots the pinned kernel under KVM
// with a timeout and never hangs; auto falls back to TCG when that guest
// does not reach its reset, and a required kvm is then refused with the
// fix. (On these nested hosts KVM hangs or aborts: auto gives tcg.)
func TestAccelProbe(t *testing.T) {
	opts := pins(t)
	ctx := context.Background()
	for _, mode := range []string{"auto", "kvm"} {
		o := opts
		o.Accel, o.RuntimeDir = mode, filepath.Join(t.TempDir(), "vm")
		start := time.Now()
		b, err := vm.New(ctx, o)
		took := time.Since(start)
		if took > vm.KVMProbeTimeout+30*time.Second {
			t.Errorf("accel %s: the probe took %s", mode, took)
		}
		switch {
		case mode == "auto" && err != nil:
			t.Fatalf("accel auto: %v", err)
		case mode == "auto":
			t.Logf("accel auto chose %s in %s", b.Accel(), took)
			if b.Accel() == "kvm" {
				return // a host where KVM works: nothing to refuse
			}
		case err == nil:
			t.Errorf("accel kvm on a host where the probe guest failed: a backend was made (%s)", b.Accel())
		case !strings.Contains(err.Error(), "fix:"):
			t.Errorf("accel kvm refused without a fix: %v", err)
		default:
			t.Logf("accel kvm refused in %s: %v", took, err)
		}
	}
}
