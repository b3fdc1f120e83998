package daemon

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/host"
)

// TestSweepLogs: retention removes kept streams whose run has no record,
// and keeps those of a recorded run, of a run in flight, and files that
// are no run's stream.
func TestSweepLogs(t *testing.T) {
	d := startDaemon(t)
	res, err := d.submit.Run(context.Background(), d.issue("echo kept; echo kept too >&2"), io.Discard, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := host.LogDir(runnerConfig(d.cfg.Runner))
	for _, name := range []string{"0123456789abcdef.stdout", "0123456789abcdef.stderr", "live0000live0000.stdout", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.s.mu.Lock()
	d.s.active["live0000live0000"] = &activeRun{cancel: func() {}}
	d.s.mu.Unlock()
	defer func() {
		d.s.mu.Lock()
		delete(d.s.active, "live0000live0000")
		d.s.mu.Unlock()
	}()
	n, err := d.s.sweepLogs()
	if err != nil || n != 2 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	for name, kept := range map[string]bool{
		res.RunID + ".stdout": true, res.RunID + ".stderr": true, "live0000live0000.stdout": true, "notes.txt": true,
		"0123456789abcdef.stdout": false, "0123456789abcdef.stderr": false,
	} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != kept {
			t.Fatalf("%s: kept %v, want %v", name, err == nil, kept)
		}
	}
}
