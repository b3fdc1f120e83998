package platform

import (
	"context"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Probe proves what this host can do for a container runtime and returns
// the evidence. It creates only uniquely named cgroups, directories and
// mounts of its own, and removes them before returning, even on failure.
// It needs root for the cgroup and mount probes.
//
// A failed sub-probe is recorded in the Profile (a Fact with OK false, a
// missing controller with its reason, Runtime.Error) rather than returned:
// Probe returns an error only when it cannot probe at all.
func Probe(ctx context.Context, opts Options) (*Profile, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	opts = opts.withDefaults()

	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil, fmt.Errorf("probe: uname: %w", err)
	}
	mounts, err := readMountInfo(procSelfMountInfo)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}

	p := &Profile{
		Kernel: unix.ByteSliceToString(uts.Release[:]),
		Arch:   runtime.GOARCH,
		OS:     runtime.GOOS,
		Distro: readDistro(),
		Cgroup: probeCgroups(mounts, opts.CgroupRoot, opts.OwnCgroup),
	}
	p.Cgroup.note(opts.CgroupNotes)
	p.Seccomp = probeSeccomp()
	p.UserNS = probeUserNS(ctx)
	p.Tmpfs = probeTmpfs(opts.ScratchDir)
	p.Overlay = probeOverlay(opts.ScratchDir)
	p.Idmap = ProbeIdmap(ctx, opts.ScratchDir)
	p.PidfdNetns = probePidfdNetns(ctx, opts.PidfdNetnsFault)
	if opts.RuntimePath != "" {
		rt, err := ProbeRuntime(ctx, opts.RuntimePath)
		if err != nil {
			rt = &Runtime{Path: opts.RuntimePath, Error: err.Error()}
		}
		p.Runtime = rt
	}
	return p, nil
}

// ProbeCgroups probes the cgroup hierarchies again and returns a copy of
// prev with what it found: what custodyd needs once it has enabled the
// runs' controllers, without repeating the probes of facts that did not
// change (seccomp, namespaces, mounts, the runtime), which take seconds.
func ProbeCgroups(ctx context.Context, prev *Profile, opts Options) (*Profile, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	opts = opts.withDefaults()
	mounts, err := readMountInfo(procSelfMountInfo)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p := *prev
	p.Cgroup = probeCgroups(mounts, opts.CgroupRoot, opts.OwnCgroup)
	p.Cgroup.note(opts.CgroupNotes)
	return &p, nil
}
