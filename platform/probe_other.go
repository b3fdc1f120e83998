//go:build !linux

package platform

import (
	"context"
	"errors"
)

// Probe proves what this host can do for a container runtime. Only Linux
// hosts can be probed.
func Probe(ctx context.Context, opts Options) (*Profile, error) {
	return nil, errors.New("probe: only linux hosts can run containers")
}

// ProbeOpenat2 reports openat2 missing: it is a Linux system call.
func ProbeOpenat2() Fact {
	return Fact{How: "openat2", Detail: "not a Linux host"}
}

// ProbeIdmap reports idmapped mounts missing: they are a Linux feature.
func ProbeIdmap(ctx context.Context, dir string) Fact {
	return Fact{How: "idmap " + dir, Detail: "not a Linux host"}
}

// SealedImagesCheck warns: sealed images need Linux.
func SealedImagesCheck(ctx context.Context) Check {
	return Check{Name: "images.sealed", Verdict: VerdictWarn, Detail: "not a Linux host", Fix: "run custodyd on Linux"}
}

// ProbeCgroups cannot probe: only Linux hosts have cgroups.
func ProbeCgroups(ctx context.Context, prev *Profile, opts Options) (*Profile, error) {
	return nil, errors.New("probe: only linux hosts can run containers")
}
