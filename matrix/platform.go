// Package matrix is custody's signed qualification matrix (R6, R13, R14):
// the platform description a qualification is about, the row a runner
// signs after the conformance suite ran on that platform, and the gate that
// lets a release through only on a platform with a current, passing,
// authentic row.
//
// # Rows
//
// A row is a DSSE envelope (payload type application/vnd.in-toto+json),
// signed by the runner identity key of the custodyd that ran the suite,
// over an in-toto Statement v1 whose predicate is the in-toto test-result
// predicate ([PredicateType]: result PASSED or FAILED, configuration,
// passedTests, warnedTests, failedTests). The statement's only subject is
// "custody:platform" with the sha256 of the canonical [Platform]
// description. Its configuration holds, in this order:
//
//   - "custody:platform": digest = the platform digest, annotations = the
//     [Platform] itself (kernel, arch, distro, cgroup mode and controllers,
//     host facts, backend, runtime version and sha256);
//   - "custody:runtime": digest = the runtime binary's sha256,
//     annotations = {"version"};
//   - "custody:qualification": annotations = [Info]: tier, custody
//     version, suite version, runner key id, time, and every check's
//     family, name, case, result, detail and the runs (with their receipt
//     digests) it launched.
//
// The signer builds the statement itself from its own platform profile and
// derives the result: PASSED only when every check passed and every
// required family has both a legitimate and a refusal case. Like receipts,
// statements are canonical encoding/json and verification requires exactly
// that form.
//
// A row file (what custody qualify writes and custody gate reads) is a
// [Row]: the envelope plus the signer's public key as a hint. The hint is
// never trusted; a gate verifies under the runner keys it was given.
package matrix

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/platform"
)

// Version is custody's version, bound into every row the daemon signs.
// Release builds set it: -ldflags "-X github.com/custody-dev/custody/matrix.Version=v1.2.3".
var Version = "0.1.0-dev"

// Platform is what a qualification is about: the host facts and the
// pinned runtime that decide how a phase is contained. Two hosts with the
// same description are the same platform; any difference — a kernel
// update, a new runtime binary, a cgroup controller no longer delegated —
// is another platform that needs its own row.
type Platform struct {
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Kernel  string `json:"kernel"`
	Distro  string `json:"distro"`
	Backend string `json:"backend"`
	// Cgroup is the cgroup mode and the controllers the probe proved usable.
	Cgroup PlatformCgroup `json:"cgroup"`
	// Facts are the host capabilities the reviewed profile relies on.
	Facts PlatformFacts `json:"facts"`
	// Runtime is the pinned OCI runtime binary.
	Runtime PlatformRuntime `json:"runtime"`
}

// PlatformCgroup is the cgroup part of a platform.
type PlatformCgroup struct {
	Mode        string   `json:"mode"`
	V2Delegated []string `json:"v2Delegated"`
	V1Usable    []string `json:"v1Usable"`
}

// PlatformFacts are proved host capabilities.
type PlatformFacts struct {
	Seccomp bool `json:"seccomp"`
	UserNS  bool `json:"userns"`
	Tmpfs   bool `json:"tmpfs"`
	Overlay bool `json:"overlay"`
}

// PlatformRuntime identifies the runtime binary.
type PlatformRuntime struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// PlatformOf describes the platform of a probed profile as backend (its
// backend.Backend.Name) runs on it. The profile must carry an identified
// runtime.
func PlatformOf(p *platform.Profile, backend string) (Platform, error) {
	if p == nil {
		return Platform{}, errors.New("matrix: no platform profile")
	}
	if p.Runtime == nil {
		return Platform{}, errors.New("matrix: the profile has no runtime; probe it with the pinned runtime")
	}
	if p.Runtime.Error != "" {
		return Platform{}, fmt.Errorf("matrix: runtime %s could not be identified: %s", p.Runtime.Path, p.Runtime.Error)
	}
	pl := Platform{
		OS: p.OS, Arch: p.Arch, Kernel: p.Kernel, Distro: p.Distro, Backend: backend,
		Cgroup: PlatformCgroup{
			Mode:        string(p.Cgroup.Mode),
			V2Delegated: sorted(p.Cgroup.V2Delegated),
			V1Usable:    sorted(p.Cgroup.V1Usable),
		},
		Facts:   PlatformFacts{Seccomp: p.Seccomp.OK, UserNS: p.UserNS.OK, Tmpfs: p.Tmpfs.OK, Overlay: p.Overlay.OK},
		Runtime: PlatformRuntime{Version: p.Runtime.Version, SHA256: p.Runtime.SHA256},
	}
	return pl, pl.Validate()
}

func sorted(in []string) []string {
	out := append([]string{}, in...)
	slices.Sort(out)
	return slices.Compact(out)
}

// Validate checks that the description is complete and normalised.
func (p Platform) Validate() error {
	var errs []error
	need := func(field, v string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", field))
		}
	}
	need("os", p.OS)
	need("arch", p.Arch)
	need("kernel", p.Kernel)
	if !backendPattern.MatchString(p.Backend) {
		// A disabled list names a backend by this same pattern.
		errs = append(errs, fmt.Errorf("backend %q is not a backend name", p.Backend))
	}
	need("cgroup.mode", p.Cgroup.Mode)
	need("runtime.version", p.Runtime.Version)
	if !hex64.MatchString(p.Runtime.SHA256) {
		errs = append(errs, fmt.Errorf("runtime.sha256 %q is not 64 lowercase hex digits", p.Runtime.SHA256))
	}
	for name, l := range map[string][]string{"cgroup.v2Delegated": p.Cgroup.V2Delegated, "cgroup.v1Usable": p.Cgroup.V1Usable} {
		if l == nil {
			errs = append(errs, fmt.Errorf("%s is null; use []", name))
		} else if !slices.IsSorted(l) || len(slices.Compact(slices.Clone(l))) != len(l) {
			errs = append(errs, fmt.Errorf("%s is not sorted and unique", name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("matrix: platform: %w", errors.Join(errs...))
	}
	return nil
}

// Digest is the lowercase hex sha256 of the canonical JSON description.
func (p Platform) Digest() string {
	b, err := cdsse.CanonicalJSON(p)
	if err != nil {
		return "" // a Platform always encodes
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Diff names the fields in which q differs from p, each as
// `field: "p-value" vs "q-value"`.
func (p Platform) Diff(q Platform) []string {
	var out []string
	cmp := func(field, a, b string) {
		if a != b {
			out = append(out, fmt.Sprintf("%s: %q vs %q", field, a, b))
		}
	}
	cmp("os", p.OS, q.OS)
	cmp("arch", p.Arch, q.Arch)
	cmp("kernel", p.Kernel, q.Kernel)
	cmp("distro", p.Distro, q.Distro)
	cmp("backend", p.Backend, q.Backend)
	cmp("cgroup.mode", p.Cgroup.Mode, q.Cgroup.Mode)
	cmp("cgroup.v2Delegated", fmt.Sprint(p.Cgroup.V2Delegated), fmt.Sprint(q.Cgroup.V2Delegated))
	cmp("cgroup.v1Usable", fmt.Sprint(p.Cgroup.V1Usable), fmt.Sprint(q.Cgroup.V1Usable))
	cmp("facts", fmt.Sprintf("%+v", p.Facts), fmt.Sprintf("%+v", q.Facts))
	cmp("runtime.version", p.Runtime.Version, q.Runtime.Version)
	cmp("runtime.sha256", p.Runtime.SHA256, q.Runtime.SHA256)
	return out
}
