package platform

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probeSeccomp proves that a seccomp filter can be installed, by installing
// one on a throwaway thread of this process.
//
// Re-executing the binary would need a hidden mode in every program that
// links this package, and a shell one-liner cannot install a filter, so the
// probe uses a goroutine locked to its OS thread instead. Seccomp filters
// and no_new_privs are per-thread attributes when installed without
// SECCOMP_FILTER_FLAG_TSYNC, so they affect that thread only. The goroutine
// deliberately never calls runtime.UnlockOSThread: a goroutine that exits
// while locked makes the Go runtime terminate its thread rather than reuse
// it, so the filter dies with the thread. The runtime also never clones new
// threads from a locked thread, so nothing inherits the filter. The filter
// is a single "return ALLOW" instruction, so even while it lives it changes
// no system call's outcome.
func probeSeccomp() Fact {
	const how = "on a throwaway OS thread: prctl(PR_SET_NO_NEW_PRIVS), seccomp(SECCOMP_SET_MODE_FILTER) " +
		"with a one-instruction allow-all BPF program and no TSYNC, read the thread's " +
		"/proc status to confirm seccomp mode 2, then let the thread exit and confirmed it is gone"
	r := <-filterThrowawayThread()
	if r.err == nil {
		r.err = awaitThreadExit(r.tid)
	}
	if r.err != nil {
		return Fact{How: how, Detail: r.err.Error()}
	}
	return Fact{OK: true, How: how + r.observed}
}

// filterResult is what a throwaway thread reports.
type filterResult struct {
	tid      int
	observed string
	err      error
}

// filterThrowawayThread installs an allow-all filter on a new locked
// thread that exits afterwards, and reports the outcome.
func filterThrowawayThread() <-chan filterResult {
	ch := make(chan filterResult, 1)
	go func() {
		runtime.LockOSThread() // never unlocked on this path: see probeSeccomp
		if unix.Gettid() == unix.Getpid() {
			// The main thread: the runtime would park it for good rather
			// than terminate it, filter and all. Hold it (a locked thread
			// runs no other goroutine) so the retry lands elsewhere, then
			// give it back untouched.
			ch <- <-filterThrowawayThread()
			runtime.UnlockOSThread()
			return
		}
		tid := unix.Gettid()
		observed, err := installAllowAllFilter()
		ch <- filterResult{tid, observed, err}
	}()
	return ch
}

// awaitThreadExit waits for this process's thread tid to be gone; the
// runtime terminates it only after its goroutine has reported back.
func awaitThreadExit(tid int) error {
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for range 200 {
		if _, err := os.Lstat(task); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("filtered thread %d did not exit", tid)
}

// installAllowAllFilter installs an allow-all seccomp filter on the
// calling thread, which must be locked and must never be unlocked, and
// verifies through /proc that the kernel put it in force. It returns
// what it observed.
func installAllowAllFilter() (string, error) {
	status := fmt.Sprintf("/proc/self/task/%d/status", unix.Gettid())
	before, err := readSeccompStatus(status)
	if err != nil {
		return "", err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	filter := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return "", fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", errno)
	}
	runtime.KeepAlive(filter)
	after, err := readSeccompStatus(status)
	if err != nil {
		return "", err
	}
	if after.mode != 2 {
		return "", fmt.Errorf("filter installed but %s reports Seccomp: %d, want 2", status, after.mode)
	}
	// When the process was already filtered (say, inside a container),
	// mode 2 proves nothing by itself; the filter count must go up.
	if before.filters >= 0 && after.filters != before.filters+1 {
		return "", fmt.Errorf("filter installed but Seccomp_filters went from %d to %d, want +1", before.filters, after.filters)
	}
	if after.filters < 0 {
		return fmt.Sprintf(" (Seccomp: %d before, 2 after)", before.mode), nil
	}
	return fmt.Sprintf(" (Seccomp: %d before, 2 after; Seccomp_filters: %d before, %d after)",
		before.mode, before.filters, after.filters), nil
}
