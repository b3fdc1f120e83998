package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/launch"
)

// BenchmarkTrivialPhase compares a whole custody launch of /bin/true
// (admission, snapshot, runtime verification, overlay and output mounts,
// runc run through the gate, output custody, verified cleanup) with a raw
// `runc run` of an equivalent bundle, in one run.
func BenchmarkTrivialPhase(b *testing.B) {
	testenv.Root(b)
	path, version, sha := testenv.Runc(b)

	b.Run("custody", func(b *testing.B) {
		h := newHarnessWith(b, host.Runtime{Path: path, Version: version, SHA256: sha})
		req := h.phase("true")
		req.Command = []string{"/bin/true"}
		ctx := context.Background()
		b.ResetTimer()
		for b.Loop() {
			prep, err := launch.Prepare(ctx, h.r, req, h.policy)
			if err != nil {
				b.Fatal(err)
			}
			res, err := launch.Launch(ctx, h.r, prep, io.Discard, io.Discard)
			if err != nil || res.Status != "ok" {
				b.Fatalf("launch: %v %+v", err, res)
			}
		}
	})

	b.Run("raw-runc", func(b *testing.B) {
		dir := b.TempDir()
		rootfs := testenv.BusyboxRootfs(b)
		for _, d := range []string{"proc", "dev", "sys", "tmp", "out"} {
			if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		out := filepath.Join(dir, "out")
		if err := os.Mkdir(out, 0o755); err != nil {
			b.Fatal(err)
		}
		spec, err := oci.Spec(oci.Config{
			Rootfs: rootfs, Args: []string{"/bin/true"}, Cwd: "/", Hostname: "custody",
			Output: oci.Mount{Source: out, Target: "/out"}, TmpBytes: 8 << 20,
			Memory: 64 << 20, Pids: 64, CPU: 1, FileSize: 8 << 20, CgroupsPath: "custody/bench-raw",
		})
		if err != nil {
			b.Fatal(err)
		}
		data, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
			b.Fatal(err)
		}
		state := filepath.Join(dir, "state")
		i := 0
		b.ResetTimer()
		for b.Loop() {
			i++
			cmd := exec.Command(path, "--root", state, "run", "--bundle", dir, fmt.Sprintf("bench-raw-%d", i))
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("runc run: %v %s", err, out)
			}
		}
	})
}
