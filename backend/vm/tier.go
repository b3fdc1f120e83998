package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/platform"
)

// What production means for the vm backend (the docs' VM how-to says it
// to operators):
//
//   - the phase's budgets are enforced by the guest kernel's cgroup v2
//     (memory.max, pids.max, cpu.max in the workload's leaf) and its
//     bounded tmpfs mounts, and the conformance suite checks them from
//     inside the guest;
//   - the host bounds QEMU itself, from a cgroup v2 leaf of a cgroup that
//     custodyd was delegated (memory, pids, cpu and io, the platform's
//     production rule): memory.max = guest RAM + QEMUOverheadBytes,
//     pids.max = QEMUPids, cpu.max = the phase's CPU budget;
//   - QEMU is jailed (seccomp sandbox, chroot, a uid of its own, its own
//     mount and empty network namespaces, no inherited descriptors);
//   - QEMU, the kernel, the modules, the init and the stage are pinned by
//     sha256 and re-checked at every launch; the initramfs digest is in
//     the receipt.
//
// The first, third and fourth hold on any host this backend runs on. The
// second is what a cgroup v1 or hybrid host cannot give, whatever it
// still enforces: hostCgroupGaps says which.

// hostCgroupGaps are the tier's gaps in QEMU's host cgroup: for
// production, a cgroup v2 leaf under a delegating cgroup of custodyd's;
// for development, any cgroup (v1 or v2) with memory and pids.
func (b *Backend) hostCgroupGaps(production bool) []backend.Gap {
	gaps := []backend.Gap{}
	if !b.v2() {
		if production {
			return append(gaps, backend.Gap{Requirement: "R5", Code: "vm-host-cgroup-v2",
				Detail: "production needs QEMU in a cgroup v2 leaf delegated to custodyd, and this host's cgroups are " + b.v1Facts(),
				Fix:    "qualify and run production vm phases on a cgroup v2 host whose service manager delegates memory, pids, cpu and io to custodyd (Delegate=yes); on this host use the development tier for vm phases"})
		}
		if b.cgroupParents["memory"] == "" || b.cgroupParents["pids"] == "" {
			gaps = append(gaps, backend.Gap{Requirement: "R5", Code: "vm-host-cgroup",
				Detail: "no cgroup v1 memory and pids hierarchy to put QEMU in",
				Fix:    "mount the cgroup v1 memory and pids hierarchies (the host's init does), or run on a cgroup v2 host"})
		}
		return gaps
	}
	parent := b.cgroupParents[unified]
	need := []string{"memory", "pids"}
	if production {
		need = platform.ProductionControllers()
	}
	have, err := readList(filepath.Join(parent, "cgroup.subtree_control"))
	named := map[string]bool{}
	for _, c := range need {
		if err == nil && slices.Contains(have, c) {
			continue
		}
		why := "it is not in " + filepath.Join(parent, "cgroup.subtree_control")
		if err != nil {
			why = err.Error()
		}
		named[c] = true
		gaps = append(gaps, backend.Gap{Requirement: "R5", Code: "vm-host-cgroup-controller",
			Detail: fmt.Sprintf("QEMU's cgroup v2 leaf under %s needs the %s controller delegated: %s", parent, c, why),
			Fix:    "delegate memory, pids, cpu and io to custodyd's cgroup (Delegate=yes in its unit, which custodyd then enables for its runs)"})
	}
	if production && b.opts.Profile != nil {
		// The platform probe's verdict on the same cgroup (it reads a
		// child of it): a controller it could not prove is a gap too.
		for _, s := range b.opts.Profile().TierShortfalls(platform.TierProduction) {
			if !named[strings.TrimPrefix(s.Requirement, "tier.production.cgroup2.")] {
				gaps = append(gaps, backend.Gap{Requirement: s.Requirement, Code: s.Code, Detail: s.Detail, Fix: s.Fix})
			}
		}
	}
	return gaps
}

// v1Facts says, on a cgroup v1 or hybrid host, where each of QEMU's host
// bounds goes and which the host still enforces: the v1 memory, pids and
// cpu controllers hold QEMU's memory, threads and CPU as on v2, but v1
// has no delegation: custodyd writes into hierarchies that belong to the
// host's init or supervisor (its memory cgroup is whoever started it),
// and nothing proves they are custodyd's alone.
func (b *Backend) v1Facts() string {
	var held, missing []string
	for _, c := range []struct{ ctl, what string }{{"memory", "memory (memory.limit_in_bytes)"}, {"pids", "threads (pids.max)"}, {"cpu", "CPU (cpu.cfs_quota_us)"}} {
		if d := b.cgroupParents[c.ctl]; d != "" {
			held = append(held, fmt.Sprintf("%s under %s", c.what, d))
		} else {
			missing = append(missing, c.ctl)
		}
	}
	s := "cgroup v1 or hybrid (custodyd's cgroups are in v1 hierarchies, not a delegated cgroup v2 subtree)"
	if len(held) > 0 {
		s += "; the host still bounds QEMU's " + strings.Join(held, ", ") + " through cgroup v1"
	}
	if len(missing) > 0 {
		s += "; it cannot bound QEMU's " + strings.Join(missing, ", ") + ": no cgroup v1 hierarchy for it here"
	}
	return s + "; what v1 cannot give is delegation: those hierarchies belong to the host's init or supervisor, not to custodyd"
}

// readList reads a space-separated cgroup file (cgroup.subtree_control).
func readList(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data)), nil
}
