package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/internal/procfs"
)

// Cleanup kills QEMU if it still runs, unmounts the output and removes the
// bundle, then verifies each is gone. It is idempotent.
func (m *Machine) Cleanup(ctx context.Context) backend.CleanupReport {
	rep := backend.CleanupReport{Verified: true}
	step := func(name string, err error) { partial.Step(&rep, name, err) }
	if m.qemu != nil {
		m.kill()
		select {
		case <-m.qemu.done:
			step("qemu gone", m.b.processGone(m.qemu.pid, m.qemu.start))
		case <-time.After(30 * time.Second):
			step("qemu gone", fmt.Errorf("qemu %d did not end after SIGKILL", m.qemu.pid))
		}
		if rep.Verified {
			_ = m.rec.Removed(backend.Resource{Kind: KindQEMU, Name: qemuName(m.id)})
		}
		m.mark("qemu-gone")
		if q := m.warm; q != nil {
			// A warm guest that no Run read to its end: its channels'
			// host ends close once QEMU is gone.
			select {
			case <-q.console:
			case <-time.After(30 * time.Second):
			}
			q.closeReaders()
		}
	}
	// The uid is free again only once no QEMU of this launch can run.
	if m.heldUID && rep.Verified {
		m.b.releaseUID(m.uid)
		m.heldUID = false
		_ = m.rec.Removed(backend.Resource{Kind: KindUID, Name: qemuName(m.id)})
	}
	out := filepath.Join(m.dir, "out")
	if m.made.output {
		err := unmountOutput(out, nil)
		if err == nil {
			_ = m.rec.Removed(backend.Resource{Kind: KindOutputMount, Name: out})
			m.made.output = false
		}
		step("output unmounted", err)
		m.mark("unmounted")
	}
	for i, dir := range m.cgroups {
		err := removeCgroup(dir, m.cgroupIDs[i])
		if err == nil {
			_ = m.rec.Removed(backend.Resource{Kind: KindCgroup, Name: dir})
		}
		step("host cgroup removed", err)
	}
	m.cgroups, m.cgroupIDs = nil, nil
	m.mark("cgroups-removed")
	if m.made.bundle && rep.Verified {
		err := removeBundle(m.dir, m.bundleID)
		if err == nil {
			_ = m.rec.Removed(backend.Resource{Kind: KindBundle, Name: m.dir})
			m.made.bundle = false
		}
		step("bundle removed", err)
		m.mark("bundle-removed")
	}
	abs := m.b.VerifyAbsent(m.id, nil)
	m.mark("verified-absent")
	rep.Steps = append(rep.Steps, abs.Steps...)
	rep.Verified = rep.Verified && abs.Verified
	m.life.Move(opCleaned)
	return rep
}

// removeBundle removes the bundle dir if it is the one recorded and no
// mount is left in it.
func removeBundle(dir string, want map[string]string) error {
	got, err := outputfs.PathIdentity(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if want == nil || got["dev"] != want["dev"] || got["ino"] != want["ino"] {
		return fmt.Errorf("%s is dev %s ino %s, the journal recorded %v: %w", dir, got["dev"], got["ino"], want, errNotOwned)
	}
	if _, err := outputfs.MountIdentity(filepath.Join(dir, "out")); err == nil {
		return fmt.Errorf("%s still has its output mounted", dir)
	}
	return os.RemoveAll(dir)
}

// processGone says whether the process pid with start time start has
// ended (a zombie has: it runs nothing).
func (b *Backend) processGone(pid int, start string) error {
	st, err := procfs.ReadStat(pid)
	if err != nil || st.StartTime != start || st.State == 'Z' || st.State == 'X' {
		return nil
	}
	return fmt.Errorf("qemu %d (start %s) still runs", pid, start)
}

// findQEMU lists running QEMU processes launched for id: their command
// line names the launch and its bundle. Used only where the journal holds
// the process's intent but no pid (custodyd died right after starting it).
func (b *Backend) findQEMU(id string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	name := []byte("\x00" + qemuName(id) + "\x00")
	initrd := []byte(filepath.Join(b.bundle(id), "initrd.cpio"))
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, name) || !bytes.Contains(cmdline, initrd) {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.State != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAndWait kills pid if it is still the process with start time start,
// and waits until it is gone.
func (b *Backend) killAndWait(ctx context.Context, pid int, start string) error {
	if b.processGone(pid, start) == nil {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill qemu %d: %w", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.processGone(pid, start) != nil {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("qemu %d still runs after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Recover cleans up after a launch this process did not see through:
// QEMU is killed only if its recorded pid and start time match (or, with
// no pid on record, if its command line names this launch and the bundle
// dir is the one recorded), the output unmounted only if its mount id
// matches, the bundle removed only if its device and inode match.
// Anything else is reported and left alone.
func (b *Backend) Recover(ctx context.Context, id string, recorded []backend.Resource, rec backend.Recorder) backend.CleanupReport {
	rep := backend.CleanupReport{Verified: true}
	step := func(name string, err error) { partial.Step(&rep, name, err) }
	byKind := map[string]backend.Resource{}
	for _, r := range recorded {
		byKind[r.Kind] = r
	}
	bundle, haveBundle := byKind[KindBundle]
	bundleOK := haveBundle && bundle.Identity != nil && pathMatches(bundle.Name, bundle.Identity)
	if r, ok := byKind[KindQEMU]; ok && r.State != "removed" {
		var err error
		switch {
		case len(r.Identity) > 0:
			pid, perr := strconv.Atoi(r.Identity["pid"])
			if perr != nil || r.Identity["startTime"] == "" {
				err = fmt.Errorf("qemu identity %v is unreadable: %w", r.Identity, errNotOwned)
			} else {
				err = b.killAndWait(ctx, pid, r.Identity["startTime"])
			}
		case bundleOK:
			for _, pid := range b.findQEMU(id) {
				if st, serr := procfs.ReadStat(pid); serr == nil {
					if kerr := b.killAndWait(ctx, pid, st.StartTime); kerr != nil {
						err = kerr
					}
				}
			}
		default:
			if pids := b.findQEMU(id); len(pids) > 0 {
				err = fmt.Errorf("qemu %v names launch %s but neither its pid nor its bundle is on record: %w", pids, id, errNotOwned)
			}
		}
		if err == nil {
			_ = rec.Removed(backend.Resource{Kind: KindQEMU, Name: r.Name})
		}
		step("qemu gone", err)
	}
	if r, ok := byKind[KindUID]; ok && r.State != "removed" && rep.Verified {
		// The launch's QEMU is verified gone above, so its hold on the
		// uid ends. Any other process still running as it (another
		// daemon's QEMU on an overlapping range, say) is no part of this
		// launch; it keeps the uid from being handed out, since every
		// allocation skips uids in use on the host.
		var err error
		if v, ok := r.Identity["uid"]; ok {
			uid, perr := strconv.ParseUint(v, 10, 32)
			if perr != nil {
				err = fmt.Errorf("vm uid %q on record is unreadable: %w", v, errNotOwned)
			} else if gerr := uidGone(uint32(uid)); gerr != nil {
				b.log.Warn("vm: a recovered launch's uid is still in use on the host; it is not handed out while it is", "launch", id, "uid", uid, "detail", gerr)
			}
		}
		if err == nil {
			_ = rec.Removed(backend.Resource{Kind: KindUID, Name: r.Name})
		}
		step("vm uid free", err)
	}
	for _, r := range recorded {
		if r.Kind != KindCgroup || r.State == "removed" || !rep.Verified {
			continue
		}
		var err error
		switch {
		case len(r.Identity) > 0:
			err = removeCgroup(r.Name, r.Identity)
		case bundleOK:
			err = removeCgroup(r.Name, nil) // made with our own bundle
		default:
			if _, serr := os.Lstat(r.Name); serr == nil {
				err = fmt.Errorf("%s exists but neither it nor its bundle is on record: %w", r.Name, errNotOwned)
			}
		}
		if err == nil {
			_ = rec.Removed(backend.Resource{Kind: KindCgroup, Name: r.Name})
		}
		step("host cgroup removed", err)
	}
	if r, ok := byKind[KindOutputMount]; ok && r.State != "removed" {
		var err error
		switch {
		case len(r.Identity) > 0:
			err = unmountOutput(r.Name, r.Identity)
		case bundleOK:
			err = unmountOutput(r.Name, nil) // our own bundle's mount point
		default:
			if _, merr := outputfs.MountIdentity(r.Name); merr == nil {
				err = fmt.Errorf("%s is mounted but neither its mount nor its bundle is on record: %w", r.Name, errNotOwned)
			}
		}
		if err == nil {
			_ = rec.Removed(backend.Resource{Kind: KindOutputMount, Name: r.Name})
		}
		step("output unmounted", err)
	}
	if haveBundle && bundle.State != "removed" && rep.Verified {
		var err error
		if _, serr := os.Lstat(bundle.Name); serr == nil {
			err = removeBundle(bundle.Name, bundle.Identity)
		}
		if err == nil {
			_ = rec.Removed(backend.Resource{Kind: KindBundle, Name: bundle.Name})
		}
		step("bundle removed", err)
	}
	if rep.Verified {
		abs := b.VerifyAbsent(id, recorded)
		rep.Steps = append(rep.Steps, abs.Steps...)
		rep.Verified = abs.Verified
	}
	return rep
}

func pathMatches(p string, want map[string]string) bool {
	got, err := outputfs.PathIdentity(p)
	return err == nil && got["dev"] == want["dev"] && got["ino"] == want["ino"]
}

// VerifyAbsent checks that nothing of the launch exists: no bundle dir, no
// output mount, no QEMU naming it.
func (b *Backend) VerifyAbsent(id string, recorded []backend.Resource) backend.CleanupReport {
	rep := backend.CleanupReport{Verified: true}
	check := func(name string, err error) { partial.Step(&rep, name, err) }
	dir := b.bundle(id)
	var err error
	if _, serr := os.Lstat(dir); serr == nil {
		err = fmt.Errorf("bundle %s exists", dir)
	}
	check("no bundle", err)
	err = nil
	for _, dir := range b.cgroupDirs(id) {
		if _, serr := os.Lstat(dir); serr == nil {
			err = fmt.Errorf("host cgroup %s exists", dir)
		}
	}
	check("no host cgroup", err)
	err = nil
	if pids := b.findQEMU(id); len(pids) > 0 {
		err = fmt.Errorf("qemu %v runs for launch %s", pids, id)
	}
	for _, r := range recorded {
		if r.Kind == KindQEMU && r.Identity["pid"] != "" {
			if pid, perr := strconv.Atoi(r.Identity["pid"]); perr == nil {
				if gerr := b.processGone(pid, r.Identity["startTime"]); gerr != nil {
					err = gerr
				}
			}
		}
	}
	check("no qemu", err)
	return rep
}

// Foreign lists bundle dirs and QEMU processes that carry this backend's
// naming but that known (the journal) does not hold: reported, never
// touched.
func (b *Backend) Foreign(known func(kind, name string) bool) []backend.Resource {
	var out []backend.Resource
	if ents, err := os.ReadDir(b.opts.RuntimeDir); err == nil {
		for _, e := range ents {
			if p := filepath.Join(b.opts.RuntimeDir, e.Name()); !known(KindBundle, p) {
				out = append(out, backend.Resource{Kind: KindBundle, Name: p})
			}
		}
	}
	for _, parent := range b.cgroupParents {
		if ents, err := os.ReadDir(parent); err == nil {
			for _, e := range ents {
				if p := filepath.Join(parent, e.Name()); e.IsDir() && strings.HasPrefix(e.Name(), "custody-vm-") && !known(KindCgroup, p) {
					out = append(out, backend.Resource{Kind: KindCgroup, Name: p})
				}
			}
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(b.opts.RuntimeDir+"/")) {
			continue
		}
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if strings.HasPrefix(arg, "custody-vm-") && !known(KindQEMU, arg) {
				out = append(out, backend.Resource{Kind: KindQEMU, Name: arg, Identity: map[string]string{"pid": e.Name()}})
			}
		}
	}
	return out
}
