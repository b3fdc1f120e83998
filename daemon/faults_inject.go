//go:build faultinject

package daemon

import (
	"os"
	"syscall"
)

// faultHook, in fault-injection builds only, kills custodyd abruptly (as
// SIGKILL would) when a launch reaches the stage named by CUSTODY_FAULT.
func faultHook() func(stage string) {
	at := os.Getenv("CUSTODY_FAULT")
	if at == "" {
		return nil
	}
	return func(stage string) {
		if stage == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns
		}
	}
}
