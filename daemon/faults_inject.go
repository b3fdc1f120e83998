//go:build faultinject

package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// faultHook, in fault-injection builds only, kills custodyd abruptly (as
// SIGKILL would) when a launch reaches the stage named by CUSTODY_FAULT,
// and holds it at the stage named by CUSTODY_FAULT_PAUSE: it creates
// "reached" in the directory CUSTODY_FAULT_GATE and goes on once "go"
// exists there, so a test acts at exactly that point (a client racing
// custodyd, say) without guessing at timing.
func faultHook() func(stage string) {
	at, pause, gate := os.Getenv("CUSTODY_FAULT"), os.Getenv("CUSTODY_FAULT_PAUSE"), os.Getenv("CUSTODY_FAULT_GATE")
	if at == "" && (pause == "" || gate == "") {
		return nil
	}
	return func(stage string) {
		if stage == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns
		}
		if stage == pause && gate != "" {
			_ = os.WriteFile(filepath.Join(gate, "reached"), nil, 0o600)
			for {
				if _, err := os.Stat(filepath.Join(gate, "go")); err == nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}
