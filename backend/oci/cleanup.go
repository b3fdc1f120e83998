package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
)

// Cleanup removes everything this launch created and verifies each part is
// gone: no process in the cgroup, no runtime state, no cgroup directories,
// no mounts, no launch directory. It is idempotent.
func (c *Container) cleanup(ctx context.Context) *backend.CleanupReport {
	ctx = context.WithoutCancel(ctx)
	if c.rec == nil {
		c.rec = partial.Nop{}
	}
	from, _ := c.move(opCleanup) // allowed from every state
	recovery := from == stateRecovering
	r := &backend.CleanupReport{}
	if c.egress != nil {
		partial.Step(r, "egress-listeners-closed", c.closeEgress())
	}
	if c.bin != nil && c.runtimeMayHold(from) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rc, err := c.b.runtimeFor(c.bin)
		if err != nil {
			partial.Step(r, "runtime", err)
		}
		if err == nil && recovery {
			err = c.stopRecovered(dctx)
			partial.Step(r, "runtime-kill", err)
			if err == nil {
				err = c.waitRuntime(dctx, rc)
				partial.Step(r, "runtime-exited", err)
			}
		}
		// The runtime deletes its container when the workload ends; a
		// runtime call is needed only when its state is still there (the
		// run failed, or the runtime process ended with the runner).
		_, serr := os.Lstat(filepath.Join(c.b.opts.StateDir, c.id))
		if err == nil && !errors.Is(serr, fs.ErrNotExist) {
			// A plain delete suffices once init is reaped; force is kept
			// for a container that is somehow still alive.
			err = rc.delete(dctx, c.id, false)
			if err != nil && !errors.Is(err, ErrNotExist) {
				err = rc.delete(dctx, c.id, true)
			}
			if errors.Is(err, ErrNotExist) {
				err = nil
			}
			partial.Step(r, "runtime-delete", err)
		}
		cancel()
	}
	c.fault("mid-cleanup")
	// The cgroups and the mounts are separate things to undo and verify:
	// their removals overlap, and the report keeps its order.
	var cgErr, cgEmpty error
	var cgroups sync.WaitGroup
	if c.cgroups != nil {
		cgroups.Go(func() {
			c.cgroups.oomNotified() // closes the eventfd if a failed run left it
			c.cgroups.pidsNotified()
			// The kernel refuses to remove a cgroup that holds a process
			// (EBUSY), so every directory gone proves them empty.
			if cgErr = c.removeCgroups(); cgErr != nil {
				cgEmpty = c.verifyNoProcs()
			}
		})
	}
	stateDir := filepath.Join(c.b.opts.StateDir, c.id)
	stateErr := absent(stateDir)
	unmountErr := c.unmountAll(recovery)
	cgroups.Wait()
	if c.cgroups != nil {
		partial.Step(r, "cgroup-empty", cgEmpty)
		partial.Step(r, "cgroup-removed", cgErr)
		if cgErr == nil {
			for _, d := range c.cgroups.all() {
				c.removed = append(c.removed, backend.Resource{Kind: KindCgroup, Name: d})
			}
		}
	}
	partial.Step(r, "runtime-state-gone", stateErr)
	if stateErr == nil { // started or not, the runtime holds no such container
		c.removed = append(c.removed, backend.Resource{Kind: KindContainer, Name: c.id})
	}
	partial.Step(r, "unmounted", unmountErr)
	partial.Step(r, "launch-dir-removed", c.removeDir(unmountErr == nil, c.ownsDir(from)))
	if len(c.removed) > 0 {
		if err := c.rec.Removed(c.removed...); err != nil {
			partial.Step(r, "journalled", err) // the removals are verified but not on record
		}
		c.removed = nil
	}
	if c.bin != nil {
		c.bin.Close()
		c.bin = nil
	}
	r.Verified = true
	for _, s := range r.Steps {
		if !s.OK {
			r.Verified = false
		}
	}
	return r
}

func (c *Container) verifyNoProcs() error {
	pids, err := c.cgroups.procs()
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		return fmt.Errorf("processes %v remain in the container's cgroup", pids)
	}
	return nil
}

// removeCgroups removes the container's cgroup directories if runc left
// any; only the exact directories it resolved for this id are touched.
// Each directory is gone once its rmdir succeeds or finds nothing, so no
// second look is needed; runc has already removed the leaves.
func (c *Container) removeCgroups() error {
	var errs []error
	for _, d := range c.cgroups.all() {
		if want := c.idents[KindCgroup+"\x00"+d]; want != nil {
			if err := sameIdentity(d, want); errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// unmount unmounts p, retrying EBUSY for a moment. A process the daemon
// is forking for another launch holds a copy of the daemon's file table,
// and with it any file of this launch the daemon had open (its output,
// just hashed), until its exec closes them: a concurrent launch made an
// output's unmount fail that way once in about a thousand under make
// bench. That passes in well under the 250 ms allowed; a mount still busy
// then is really held (a file open on the output, say) and the cleanup is
// not verified. After a runner died, its runtime process may still be
// tearing the container down (reaping its init, whose mount namespace
// holds the launch's mounts) when recovery begins, and before the runtime's
// identity was journalled there is nothing to wait on: so in recovery the
// launch dir's own tmpfs gets 2 s. With a mount still inside, EBUSY is not
// retried: the inner one is what holds it.
func (c *Container) unmount(p string, innerLeft, recovery bool) error {
	wait := 250 * time.Millisecond
	if recovery && p == c.dir {
		wait = 2 * time.Second
	}
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := unix.Unmount(p, 0)
		if !errors.Is(err, unix.EBUSY) || innerLeft || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}

// unmountAll unmounts what this launch mounted, innermost first; nil means
// no mount is left under the launch dir.
func (c *Container) unmountAll(recovery bool) error {
	var errs []error
	var left []string
	// proven stays true while every mount this launch made, the launch
	// dir's tmpfs (mounted first, over an empty directory) last, is undone
	// by a umount of our own that succeeded: the kernel refuses a umount
	// without MNT_DETACH (EBUSY) while another mount sits beneath. Then no
	// mount can be left under the launch dir but on the directory itself,
	// which removeDir's rmdir refuses too, so the mount table need not be
	// read (it is, whenever anything else happened).
	proven := !recovery && len(c.mounted) > 0 && c.mounted[0] == c.dir
	for i := len(c.mounted) - 1; i >= 0; i-- {
		p := c.mounted[i]
		kind := KindOutputMount
		switch {
		case p == c.rootfs:
			kind = KindRootfsMount
		case p == c.dir:
			kind = KindLaunchMount
		case p == c.scratchDir():
			kind = KindScratchMount
		case filepath.Dir(p) == c.scratchDir():
			kind = KindInputMount
		}
		want := c.idents[kind+"\x00"+p]
		got, err := mountIdentity(p)
		switch {
		case err != nil:
			// Nothing mounted there (any more): gone.
			proven = false
		case want != nil && got["mountId"] != want["mountId"]:
			errs = append(errs, fmt.Errorf("mount at %s is id %s, the journal recorded %s: %w; not unmounting it",
				p, got["mountId"], want["mountId"], errNotOwned))
			left = append(left, p)
			continue
		default:
			if err := c.unmount(p, len(left) > 0, recovery); err != nil {
				proven = false
				if !errors.Is(err, unix.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
					left = append(left, p)
					continue
				}
			}
		}
		if _, err := mountIdentity(p); err == nil {
			errs = append(errs, fmt.Errorf("still mounted: %s", p))
			left = append(left, p)
			continue
		}
		c.removed = append(c.removed, backend.Resource{Kind: kind, Name: p})
	}
	c.unmountProven = false
	if len(errs) == 0 && proven && !slices.ContainsFunc(c.mountIntents, func(m backend.Resource) bool {
		return !slices.ContainsFunc(c.removed, func(r backend.Resource) bool { return r.Kind == m.Kind && r.Name == m.Name })
	}) {
		c.unmountProven = true
	} else if len(errs) == 0 {
		ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(c.dir))
		if err != nil {
			return fmt.Errorf("read mountinfo: %w", err)
		}
		for _, m := range ms {
			errs = append(errs, fmt.Errorf("still mounted: %s", m.Mountpoint))
		}
		if len(ms) == 0 {
			// The mount table holds nothing at or under the launch dir, so
			// every mount this launch intended is verified absent, the ones
			// a failed Prepare never made included.
			for _, m := range c.mountIntents {
				if !slices.ContainsFunc(c.removed, func(r backend.Resource) bool { return r.Kind == m.Kind && r.Name == m.Name }) {
					c.removed = append(c.removed, backend.Resource{Kind: m.Kind, Name: m.Name})
				}
			}
		}
	}
	c.mounted = left
	return errors.Join(errs...)
}

// removeDir removes the launch dir; owned says its removal is journalled.
func (c *Container) removeDir(nothingMounted, owned bool) error {
	// Never remove a directory that still has a mount under it: RemoveAll
	// would descend into the mounted filesystem. unmountAll, just before,
	// has read the mount table for this when it found nothing left.
	if !nothingMounted {
		if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(c.dir)); err != nil || len(left) > 0 {
			return fmt.Errorf("launch dir %s still has mounts; not removed", c.dir)
		}
	}
	if want := c.idents[KindLaunchDir+"\x00"+c.dir]; want != nil {
		if err := sameIdentity(c.dir, want); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// After a proven unmount the launch dir is the empty directory its
	// tmpfs covered: rmdir removes exactly that, and refuses (ENOTEMPTY,
	// EBUSY) a directory holding anything, a mount point included; then
	// the mount table decides, as after any other unmount.
	removed := false
	if nothingMounted && c.unmountProven {
		err := unix.Rmdir(c.dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			removed = true
		case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY):
			if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(c.dir)); err != nil || len(left) > 0 {
				return fmt.Errorf("launch dir %s still has mounts; not removed", c.dir)
			}
		default:
			return fmt.Errorf("remove launch dir: %w", err)
		}
	}
	if !removed {
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("remove launch dir: %w", err)
		}
	}
	if err := absent(c.dir); err != nil {
		return err
	}
	if owned {
		c.removed = append(c.removed, backend.Resource{Kind: KindLaunchDir, Name: c.dir})
	}
	return nil
}

func absent(p string) error {
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("%s still exists", p)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check %s: %w", p, err)
	}
	return nil
}
