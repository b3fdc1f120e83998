package platform

import (
	"fmt"
	"strings"
)

// Verdicts of a doctor check.
const (
	VerdictOK          = "ok"
	VerdictFail        = "fail"        // custody cannot run work here until it is fixed
	VerdictWarn        = "warn"        // work runs, with less than the host could give
	VerdictUnsupported = "unsupported" // a tier this host cannot run (another may)
	VerdictSkipped     = "skipped"     // nothing configured to check
)

// Check is one host fact custody depends on, with its verdict and, unless
// it is ok, what to do about it.
type Check struct {
	Name    string `json:"name"`
	Verdict string `json:"verdict"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix"`
}

// Expect is what the operator configured and the doctor checks the host
// against: the pinned runtime (custodyd.yaml's runner.runtime) and whether
// packs are configured. Zero values check nothing of theirs.
type Expect struct {
	RuntimeVersion string // pinned version, "" when not pinned
	RuntimeSHA256  string // pinned digest, "" when not pinned
	// Engine is the verdict on the configured Docker engine; nil when
	// custodyd.yaml has no docker section.
	Engine *Check
}

// Diagnose turns a profile into the doctor's checks, in a fixed order (the
// same on every run): runtime, kernel facts, cgroups, tiers, engine.
// openat2 is the fact packs' bind resolution needs.
func Diagnose(p *Profile, openat2 Fact, want Expect) []Check {
	var out []Check
	out = append(out, runtimeCheck(p.Runtime, want))
	for _, f := range []struct {
		name, verdict, fix string
		fact               Fact
	}{
		{"seccomp", VerdictFail, "use a kernel built with CONFIG_SECCOMP_FILTER; the reviewed profile installs a default-deny filter", p.Seccomp},
		{"tmpfs", VerdictFail, "run custodyd as root with mount rights (not in a container that denies mount)", p.Tmpfs},
		{"overlay", VerdictFail, "load the overlay module (modprobe overlay) and keep stateDir on a filesystem overlay accepts as a lower layer", p.Overlay},
		{"userns", VerdictWarn, "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0); without them a run's root is the host's uid 0 inside the other namespaces", p.UserNS},
		{"idmap", VerdictWarn, "keep stateDir on a filesystem the kernel can idmap (ext4, xfs or btrfs; tmpfs from Linux 6.3); without it images are mounted unmapped and images with non-root owners are refused", p.Idmap},
		{"pidfd-netns", VerdictWarn, "use Linux 5.8 or later (setns on a pidfd) and run custodyd as root; without it restricted egress and credentials are refused (network: deny still runs)", p.PidfdNetns},
		{"openat2", VerdictWarn, "use Linux 5.6 or later: packs resolve bind sources with openat2 and are refused without it (phases do not need it)", openat2},
	} {
		c := Check{Name: f.name, Verdict: VerdictOK, Detail: f.fact.How}
		if !f.fact.OK {
			c.Verdict, c.Detail, c.Fix = f.verdict, f.fact.How+": "+f.fact.Detail, f.fix
		}
		out = append(out, c)
	}
	cg := p.Cgroup
	mode := Check{Name: "cgroup.mode", Verdict: VerdictOK, Detail: string(cg.Mode)}
	if cg.Mode == CgroupNone {
		mode.Verdict, mode.Fix = VerdictFail, "mount cgroup2 (or the v1 memory, pids, cpu and cpuacct hierarchies)"
	}
	out = append(out, mode,
		Check{Name: "cgroup.v2.delegated", Verdict: VerdictOK, Detail: listOrNone(cg.V2Delegated)},
		Check{Name: "cgroup.v1.usable", Verdict: VerdictOK, Detail: listOrNone(cg.V1Usable)})
	runnable := 0
	for _, tier := range []string{TierProduction, TierDevelopment} {
		c := Check{Name: "tier." + tier, Verdict: VerdictOK, Detail: "this host's cgroups enforce its budgets"}
		if gaps := p.TierShortfalls(tier); len(gaps) > 0 {
			var why []string
			for _, g := range gaps {
				why = append(why, g.Detail)
			}
			c.Verdict, c.Detail, c.Fix = VerdictUnsupported, strings.Join(why, "; "), gaps[0].Fix
		} else {
			runnable++
		}
		if tier == TierDevelopment && c.Verdict == VerdictOK {
			c.Detail += " (unqualified: only where operator policy enables the development tier)"
		}
		out = append(out, c)
	}
	if runnable == 0 {
		out = append(out, Check{Name: "tiers", Verdict: VerdictFail, Detail: "no tier can run on this host",
			Fix: "fix the cgroup checks above"})
	}
	if want.Engine != nil {
		out = append(out, *want.Engine)
	} else {
		out = append(out, Check{Name: "docker.engine", Verdict: VerdictSkipped, Detail: "no docker section configured: packs are off",
			Fix: "add docker: to custodyd.yaml (and pass --config) to run and check packs"})
	}
	return out
}

func runtimeCheck(rt *Runtime, want Expect) Check {
	c := Check{Name: "runtime"}
	switch {
	case rt == nil:
		c.Verdict, c.Detail = VerdictSkipped, "no runtime to probe"
		c.Fix = "pass --runtime PATH, or --config custodyd.yaml to check the pinned runtime"
	case rt.Error != "":
		c.Verdict, c.Detail = VerdictFail, rt.Error
		c.Fix = "build the pinned runtime (make build puts it in bin/custody-runc) and point runner.runtime.path at it"
	case want.RuntimeSHA256 != "" && rt.SHA256 != want.RuntimeSHA256:
		c.Verdict = VerdictFail
		c.Detail = fmt.Sprintf("%s has sha256 %s, the configuration pins %s: custodyd refuses every launch", rt.Path, rt.SHA256, want.RuntimeSHA256)
		c.Fix = "reinstall the pinned runtime, or (after review) pin the new digest in runner.runtime.sha256"
	case want.RuntimeVersion != "" && rt.Version != want.RuntimeVersion:
		c.Verdict = VerdictFail
		c.Detail = fmt.Sprintf("%s reports version %s, the configuration pins %s", rt.Path, rt.Version, want.RuntimeVersion)
		c.Fix = "install the pinned version, or (after review) pin the new one in runner.runtime.version"
	default:
		c.Verdict = VerdictOK
		c.Detail = fmt.Sprintf("%s runc %s sha256:%s", rt.Path, rt.Version, rt.SHA256)
		if want.RuntimeSHA256 != "" {
			c.Detail += " (the pinned digest)"
		} else {
			c.Detail += " (not compared with a pin: pass --config)"
		}
	}
	return c
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// Failed reports whether any check fails (a tier this host cannot run is
// not a failure while another can).
func Failed(cs []Check) bool {
	for _, c := range cs {
		if c.Verdict == VerdictFail {
			return true
		}
	}
	return false
}
