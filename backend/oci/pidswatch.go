package oci

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/procfs"
)

// pidsWatch counts the forks the pids limit refused in the runtime's leaf.
// The kernel counts them in the forking task's own cgroup's pids.events
// (hierarchically only on recent v2 kernels), and runc deletes that leaf as
// the container ends, so the count is watched while the leaf exists. On
// cgroup v2 every refused fork notifies pids.events (an inotify IN_MODIFY;
// nothing else modifies that file), and events still queued when the watch
// stops are drained, so a fork refused just before the workload exited
// still counts. cgroup v1 sends no notification: there the file is read
// every pidsPoll while the leaf exists, and once more the moment the
// workload's init exits (a pidfd), which is before runc can reap it and
// remove the leaf; a fork refused in that last instant that the read
// still loses leaves the run failed, as before, never pids-limit falsely.
// pidsPoll is how often the watch reads pids.events without a
// notification.
const pidsPoll = 10 * time.Millisecond

type pidsWatch struct {
	fd, stop int // the inotify fd; an eventfd that ends the loop
	pidfd    int // the workload's init, -1 when it could not be opened
	done     chan struct{}
	hits     atomic.Int64
}

// watchPids arms the watch on the leaf's pids.events for the container
// whose init is pid. A host without the file (no pids controller on the
// leaf) is not watched: hits then read -1.
func (cg *cgroupDirs) watchPids(pid int) error {
	d := cg.dir("pids")
	if cg.unified {
		d = cg.dirs[""]
	}
	if d == "" {
		return nil
	}
	events := filepath.Join(d, "pids.events")
	// v1 never notifies, so there the watch is the polling alone: an
	// inotify instance would only cost its teardown (an SRCU grace period
	// on a kernel worker) at every launch.
	fd := -1
	if cg.unified {
		var err error
		if fd, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err != nil {
			return fmt.Errorf("pids limit watch: %w", err)
		}
		if _, err := unix.InotifyAddWatch(fd, events, unix.IN_MODIFY); err != nil {
			unix.Close(fd)
			return fmt.Errorf("pids limit watch on %s: %w", events, err)
		}
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return fmt.Errorf("pids limit watch: %w", err)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		pidfd = -1 // the polling still reads the leaf
	}
	w := &pidsWatch{fd: fd, stop: stop, pidfd: pidfd, done: make(chan struct{})}
	cg.pids = w
	go w.loop(events)
	return nil
}

func (w *pidsWatch) loop(events string) {
	defer close(w.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.stop), Events: unix.POLLIN},
		{Fd: int32(w.pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, int(pidsPoll.Milliseconds())); err != nil && err != unix.EINTR {
			return
		}
		stopping := fds[1].Revents != 0
		if fds[2].Revents != 0 {
			fds[2].Fd = -1 // the init exited: read now, then only poll
		}
		if b, err := procfs.ReadFile(events, 256); err == nil {
			w.hits.Store(max(w.hits.Load(), pidsMax(b)))
		}
		// Read whatever is queued (all of it when stopping).
		for w.fd >= 0 {
			n, err := unix.Read(w.fd, buf)
			if err != nil || n <= 0 {
				break
			}
			w.count(buf[:n], events)
		}
		if stopping {
			return
		}
	}
}

// count adds the IN_MODIFY events in buf.
func (w *pidsWatch) count(buf []byte, events string) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		mask := binary.NativeEndian.Uint32(buf[off+4:])
		off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		if mask&unix.IN_MODIFY == 0 {
			continue
		}
		// At least one refused fork; the file says how many while the
		// leaf is there.
		seen := max(w.hits.Load(), 1)
		if b, err := procfs.ReadFile(events, 256); err == nil {
			seen = max(seen, pidsMax(b))
		}
		w.hits.Store(seen)
	}
}

// pidsMax reads the "max N" line of pids.events (0 when absent).
func pidsMax(b []byte) int64 {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if k, v, ok := strings.Cut(string(line), " "); ok && k == "max" {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return 0
}

// pidsNotified stops watching and returns the refused forks seen (-1: not
// watched). Call it once runc has deleted the leaf; calling it again is a
// no-op that returns -1.
func (cg *cgroupDirs) pidsNotified() int64 {
	w := cg.pids
	if w == nil {
		return -1
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	// A write to a fresh eventfd cannot fail (it only overflows at 2^64-1).
	_, _ = unix.Write(w.stop, one[:])
	<-w.done
	// Closing an inotify instance waits for an SRCU grace period in the
	// kernel (fsnotify tears its group down synchronously): 10-15 ms of
	// wall time on every launch, after the count is final. Nothing waits
	// on that close, so it happens off the launch's path.
	if w.fd >= 0 {
		go unix.Close(w.fd)
	}
	unix.Close(w.stop)
	if w.pidfd >= 0 {
		unix.Close(w.pidfd)
	}
	cg.pids = nil
	return w.hits.Load()
}
