package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/sealed"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/platform"
)

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Sandbox = (*Container)(nil)
)

// Name is "oci".
func (b *Backend) Name() string { return string(backend.KindOCI) }

// Identity is the pinned runtime: what a grant binds and a receipt records.
func (b *Backend) Identity() backend.Identity {
	rt := b.opts.Runtime
	return backend.Identity{Kind: string(backend.KindOCI), Version: rt.Version, Path: rt.Path, SHA256: rt.SHA256}
}

// Capabilities are what runc enforces on this host: budgets through the
// cgroup controllers each tier needs, and the reviewed profile's seccomp
// filter, bounded tmpfs mounts and overlay rootfs, each as the probe
// proved them. Restricted egress is claimed only when the caller serves it
// and the probe proved the listeners can be opened in a sandbox's
// namespace through a pidfd. Without a profile it claims nothing.
func (b *Backend) Capabilities() backend.Capabilities {
	caps := backend.Capabilities{UserNamespace: b.opts.UserNS != nil, HostImageOwners: b.opts.UserNS == nil || b.noIdmap.Load(),
		WritableInputs: true, SealedImages: b.sealedMounts()}
	var prof *platform.Profile
	if b.opts.Profile != nil {
		prof = b.opts.Profile()
	}
	if b.opts.Egress {
		if prof == nil {
			caps.EgressGaps = []backend.Gap{{Requirement: "platform.pidfd-netns", Code: "pidfd-netns-unavailable",
				Detail: "no platform probe proved that the egress listeners can be opened in a sandbox's network namespace",
				Fix:    "run under custodyd, which probes the platform at start"}}
		} else {
			caps.EgressGaps = partial.Gaps(prof.FactShortfalls("pidfd-netns"))
		}
		caps.RestrictedEgress = len(caps.EgressGaps) == 0
	}
	if prof == nil {
		return caps
	}
	caps.Tiers = map[string][]backend.Gap{
		platform.TierProduction:  partial.Gaps(prof.TierShortfalls(platform.TierProduction)),
		platform.TierDevelopment: partial.Gaps(prof.TierShortfalls(platform.TierDevelopment)),
	}
	caps.Controls = partial.Gaps(prof.FactShortfalls("seccomp", "tmpfs", "overlay"))
	// The probe at start says whether the image store's filesystem can be
	// idmapped, so admission refuses images with non-root owners before
	// any launch tries it (a launch that finds out sets noIdmap too).
	if prof.Idmap.How != "" && !prof.Idmap.OK {
		caps.HostImageOwners = true
	}
	return caps
}

// Prepare makes a container for s up to the gate: launch dir, overlay
// rootfs, bounded output and config.json. The caller has journalled
// Intents(id) durably (with the grant it spends), so Prepare records only
// what it creates. On error the returned Sandbox, if non-nil, still needs
// Cleanup.
func (b *Backend) Prepare(ctx context.Context, id string, s backend.Spec, rec backend.Recorder) (backend.Sandbox, error) {
	env := s.Env
	var ca []byte
	if s.Egress != nil {
		ca = s.Egress.CACert
		if !b.opts.Egress || s.Egress.Attach == nil {
			return nil, errors.New("oci: restricted egress is not served on this runner (Capabilities.RestrictedEgress is false); fix: ask for network: deny and no credentials")
		}
		if caps := b.Capabilities(); !caps.RestrictedEgress {
			g := caps.EgressGaps[0]
			return nil, fmt.Errorf("oci: %s: restricted egress is refused: %s; fix: %s, or ask for network: deny and no credentials", g.Requirement, g.Detail, g.Fix)
		}
		env = withEnv(s.Env, s.Egress.Env)
	}
	cfg := Config{
		Args: s.Args, Env: env, Cwd: s.Cwd, Hostname: s.Hostname, UID: s.UID, GID: s.GID,
		Output:   Mount{Target: s.OutputPath},
		TmpBytes: s.TmpBytes, Memory: s.Memory, Pids: s.Pids, CPU: s.CPU, FileSize: s.FileSize,
		StopSignal: s.StopSignal, Nofile: s.Nofile,
	}
	for _, in := range s.Inputs {
		cfg.Inputs = append(cfg.Inputs, Mount{Source: in.Source, Target: in.Target, Writable: in.Writable})
	}
	c, err := b.prepare(ctx, Launch{
		ID: id, ImageRootfs: s.Rootfs, ImageSealed: b.mountableSeal(s.Sealed), Config: cfg,
		OutputBytes: s.OutputBytes, OutputFiles: s.OutputFiles,
		Recorder: rec, Journalled: true, EgressCA: ca,
	})
	if c == nil {
		return nil, err // a nil *Container must not become a non-nil Sandbox
	}
	c.egress = s.Egress
	if err != nil {
		// Part of the sandbox was made: the run failed to start, in
		// preparation, and its cleanup follows.
		return c, &StartError{Stage: StagePrepare, Err: err}
	}
	return c, nil
}

// withEnv is env with add's variables replacing any of the same name,
// sorted as Spec.Env is.
func withEnv(env, add []string) []string {
	names := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			out = append(out, kv)
		}
	}
	out = append(out, add...)
	slices.Sort(out)
	return out
}

// VerifyAbsent checks that none of a launch's recorded resources exists,
// without a runtime: for an attempt refused before Prepare made anything.
func (b *Backend) VerifyAbsent(id string, recorded []backend.Resource) backend.CleanupReport {
	return *b.verifyAbsent(id, recorded)
}

// Recover cleans up after an attempt this process did not see through,
// acting only where the journal and the native identity agree.
func (b *Backend) Recover(ctx context.Context, id string, recorded []backend.Resource, rec backend.Recorder) backend.CleanupReport {
	return *b.recoverLaunch(ctx, id, recorded, rec)
}

// Run runs the container with one run of the runtime to the end (see run).
func (c *Container) Run(ctx context.Context, wall time.Duration, out backend.IO) (*backend.Exit, error) {
	if wall <= 0 {
		return nil, fmt.Errorf("oci: a wall time is required")
	}
	return c.run(ctx, wall, out.Stdout, out.Stderr)
}

// Output is the bounded output filesystem on the host.
func (c *Container) Output() backend.Output { return output{c} }

type output struct{ c *Container }

func (o output) Dir() string          { return o.c.OutputDir() }
func (o output) Used() (int64, error) { return o.c.OutputUsed() }

// Evidence names what a receipt records of this launch: the runtime bytes
// that ran, its config.json, the gate and the seccomp filter the gate
// installed.
func (c *Container) Evidence() map[string]string {
	ev := map[string]string{"gate": c.b.GateSHA256(), "seccomp": c.b.FilterSHA256()}
	if rt := c.RuntimeSHA256(); rt != "" {
		ev["runtime"] = rt
	}
	if c.config != nil {
		ev["config"] = c.ConfigSHA256()
	}
	return ev
}

// Cleanup removes everything the launch created and verifies each part is
// gone. It is idempotent.
func (c *Container) Cleanup(ctx context.Context) backend.CleanupReport { return *c.cleanup(ctx) }

// Foreign lists launch dirs, runtime containers and cgroups that carry this
// backend's naming but that known (the journal) does not hold: look-alikes
// that are reported and never touched.
func (b *Backend) Foreign(known func(kind, name string) bool) []backend.Resource {
	var out []backend.Resource
	if ents, err := os.ReadDir(b.opts.RuntimeDir); err == nil {
		for _, e := range ents {
			if p := filepath.Join(b.opts.RuntimeDir, e.Name()); !known(KindLaunchDir, p) {
				out = append(out, backend.Resource{Kind: "launch dir", Name: p})
			}
		}
	}
	if ents, err := os.ReadDir(b.opts.StateDir); err == nil {
		for _, e := range ents {
			if e.IsDir() && !known(KindContainer, e.Name()) && !strings.HasPrefix(e.Name(), sealed.ProbePrefix) {
				out = append(out, backend.Resource{Kind: "runtime container", Name: e.Name()})
			}
		}
	}
	for _, d := range b.CgroupParents() {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			if e.IsDir() && strings.HasPrefix(e.Name(), "custody-") && !known(KindCgroup, p) {
				out = append(out, backend.Resource{Kind: "cgroup", Name: p})
			}
		}
	}
	return out
}
