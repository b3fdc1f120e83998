package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// HoldOutput opens file name in the output of the next launch under
// runtimeDir as soon as it appears, so that the launch's cleanup cannot be
// verified (a busy mount). The channel yields the open file, or nil if none
// appeared within 15 s. When the test ends the file is closed and the
// mounts it held busy are unmounted.
func HoldOutput(t testing.TB, runtimeDir, name string) <-chan *os.File {
	held := make(chan *os.File, 1)
	var f *os.File
	done := make(chan struct{})
	go func() {
		defer close(done)
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			ents, _ := os.ReadDir(runtimeDir)
			for _, e := range ents {
				var err error
				if f, err = os.Open(filepath.Join(runtimeDir, e.Name(), "out", name)); err == nil {
					held <- f
					return
				}
			}
		}
		held <- nil
	}()
	t.Cleanup(func() {
		<-done
		if f != nil {
			f.Close()
		}
		ents, _ := os.ReadDir(runtimeDir)
		for _, e := range ents {
			for _, m := range []string{"out", "rootfs", ""} {
				_ = syscall.Unmount(filepath.Join(runtimeDir, e.Name(), m), 0)
			}
		}
	})
	return held
}
