package launch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// Prepared is an admitted phase whose inputs are snapshotted: a change to
// the host paths after this point cannot reach the run.
type Prepared struct {
	// RunID names the run; Launch picks a random one if it is empty.
	RunID string
	// GrantID is journalled with the attempt.
	GrantID string
	Plan    *admission.Plan
	Image   *image.Image
	// Inputs are the plan's inputs with their snapshot digests.
	Inputs []admission.Input
	// Mounts are the snapshots as the sandbox binds them, one per input.
	Mounts []backend.Mount
}

// Admit is admission against the host's facts (its quarantine, images
// and backends) alone, mutating nothing: Decide and Redeem add the
// actor, credential and output checks.
func Admit(h *host.Runner, req *request.Phase, pol *policy.Policy) (*admission.Plan, error) {
	return admit(h, req, pol, filepath.EvalSymlinks)
}

// admitByPath is Admit without looking at any host path a request names:
// verifier roots are matched on the policy's spelling alone. It is the
// dry run a client that may not see those paths gets; what it cannot
// check there, the grant issue does.
func admitByPath(h *host.Runner, req *request.Phase, pol *policy.Policy) (*admission.Plan, error) {
	return admit(h, req, pol, nil)
}

func admit(h *host.Runner, req *request.Phase, pol *policy.Policy, resolve func(string) (string, error)) (*admission.Plan, error) {
	if err := h.CheckQuarantineFor(req.Backend); err != nil {
		return nil, err
	}
	img, imgErr := h.Images().Get(req.Image)
	if imgErr != nil && !errors.Is(imgErr, image.ErrNotFound) {
		return nil, imgErr
	}
	b, err := h.BackendNamed(req.BackendName())
	if err != nil {
		b = h.Backend() // admission refuses the name, with its fix
	}
	caps := b.Capabilities()
	facts := admission.Facts{Capabilities: &caps, ImagePresent: imgErr == nil, Backends: h.BackendNames(), Resolve: resolve}
	if img != nil {
		// What admission reads in the tree (users, the workdir) is read
		// from what the backend will mount.
		tree, done, err := h.Images().Tree(img, caps.SealedImages)
		if err != nil {
			return nil, err
		}
		defer done()
		facts.Image = &admission.ImageFacts{Manifest: img.Manifest, ConfigDigest: img.ConfigDigest,
			Config: imageConfig(img.Config), Owned: len(img.IDs) > 0, Tree: tree}
	}
	return admission.Admit(req, pol, facts)
}

// imageConfig is an image's run defaults as admission takes them.
func imageConfig(c *image.Config) admission.ImageConfig {
	if c == nil {
		return admission.ImageConfig{}
	}
	return admission.ImageConfig{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, StopSignal: c.StopSignal}
}

// Prepare admits req under pol and snapshots its inputs.
func Prepare(ctx context.Context, h *host.Runner, req *request.Phase, pol *policy.Policy) (*Prepared, error) {
	plan, err := Admit(h, req, pol)
	if err != nil {
		return nil, err
	}
	return snapshotInputs(ctx, h, plan, nil, nil, nil)
}

// snapshotInputs copies an admitted plan's inputs into the snapshot store. After
// it, a change to the host paths cannot reach the run. want, if set, is
// the tree of each input just re-derived where it is (a launch's): a
// stored snapshot of it is verified and used without walking the input
// again, and anything else is linked or copied in from that tree, each
// file copied checked against it. ahead, if set with want, holds the
// verifications of the stored copies started before want was taken.
//
// An input in pinned is read through what was opened as the client.
func snapshotInputs(ctx context.Context, h *host.Runner, plan *admission.Plan, want []*treehash.Tree, ahead []*snapshot.Ahead, pinned map[int]*peerInput) (*Prepared, error) {
	if err := h.CheckQuarantineFor(plan.Backend); err != nil {
		return nil, err
	}
	img, err := h.Images().Get(plan.Image)
	if err != nil {
		return nil, err
	}
	p := &Prepared{Plan: plan, Image: img}
	avoid, err := verifierIdentities(ctx, plan)
	if err != nil {
		return nil, err
	}
	budget := plan.InputBytes
	for i, in := range plan.Inputs {
		src, root, err := inputPath(h, i, in)
		if err != nil {
			return nil, err
		}
		limits := treehash.Options{MaxBytes: budget, Beneath: root, Avoid: avoid}
		pinInput(pinned[i], &src, &limits)
		var snap *snapshot.Snapshot
		if want != nil {
			var a *snapshot.Ahead
			if i < len(ahead) {
				a = ahead[i]
			}
			snap, err = h.Inputs().TakeTree(ctx, src, want[i], limits, a)
		} else {
			snap, err = h.Inputs().Take(ctx, src, limits)
		}
		if err != nil {
			return nil, inputRefusal(i, err)
		}
		if err := sameOutput(i, in, snap.Digest); err != nil {
			return nil, err
		}
		budget -= snap.Tree.Bytes
		p.Inputs = append(p.Inputs, admission.Input{Source: in.Source, Target: in.Target, Root: in.Root, Digest: snap.Digest, Writable: in.Writable})
		p.Mounts = append(p.Mounts, backend.Mount{Source: snap.Path, Target: in.Target, Writable: in.Writable})
	}
	return p, nil
}

// HashInputs digests a plan's inputs where they are, without copying or
// writing anything: what a launch would snapshot, for checks that must
// happen before any mutation.
func HashInputs(ctx context.Context, h *host.Runner, plan *admission.Plan) ([]admission.Input, error) {
	out, _, err := hashInputs(ctx, h, plan, nil)
	return out, err
}

// hashInputs is HashInputs, returning each input's tree too. An input in
// pinned is read through what was opened as the client, never by its path.
func hashInputs(ctx context.Context, h *host.Runner, plan *admission.Plan, pinned map[int]*peerInput) (out []admission.Input, trees []*treehash.Tree, err error) {
	var need diskNeed
	avoid, err := verifierIdentities(ctx, plan)
	if err != nil {
		return nil, nil, err
	}
	budget := plan.InputBytes
	for i, in := range plan.Inputs {
		src, root, err := inputPath(h, i, in)
		if err != nil {
			return nil, nil, err
		}
		opts := treehash.Options{MaxBytes: budget, Beneath: root, Avoid: avoid}
		pinInput(pinned[i], &src, &opts)
		tree, err := h.Inputs().Digest(ctx, src, opts)
		if err != nil {
			return nil, nil, inputRefusal(i, err)
		}
		if err := sameOutput(i, in, tree.Digest); err != nil {
			return nil, nil, err
		}
		budget -= tree.Bytes
		trees = append(trees, tree)
		out = append(out, admission.Input{Source: in.Source, Target: in.Target, Root: in.Root, Digest: tree.Digest})
		if !h.Inputs().Has(tree.Digest) { // a stored copy is reused, not written
			need.bytes += tree.Bytes
			need.inodes += int64(len(tree.Entries)) + 2
		}
	}
	if err := checkSpace(h, need); err != nil {
		return nil, nil, err
	}
	return out, trees, nil
}

// inputPath is where input i is read from, and the root it is reached
// beneath: its host source below its policy root, or, for a retained
// output named by digest, the runner's own stored copy below its output
// store. Nothing the caller names is a path here.
func inputPath(h *host.Runner, i int, in admission.Input) (src, root string, err error) {
	d, ok := in.OutputDigest()
	if !ok {
		return in.Source, in.Root, nil
	}
	snap, err := h.Outputs().Get(d)
	if err != nil {
		code, fix := "input-output-unreadable", "an operator must check the runner's output store"
		if errors.Is(err, snapshot.ErrNotFound) {
			code, fix = "input-output-unknown", "name the output digest of a run on this runner whose output is still retained (custody result RUN), or run that stage again"
		}
		return "", "", &admission.RefusedError{Checks: []admission.Check{{
			Requirement: fmt.Sprintf("inputs[%d].source", i), Verdict: admission.NotGranted, Code: code,
			Detail: fmt.Sprintf("%s: %v", in.Source, err), Fix: fix,
		}}}
	}
	return snap.Path, h.OutputsDir(), nil
}

// outputInput refuses input i if it names a retained output the store
// does not hold; it reads nothing of the output (a dry run's check, with
// no digest taken).
func outputInput(h *host.Runner, i int, in admission.Input) error {
	_, _, err := inputPath(h, i, in)
	return err
}

// sameOutput refuses a retained output whose stored copy no longer hashes
// to the digest that names it.
func sameOutput(i int, in admission.Input, got string) error {
	if d, ok := in.OutputDigest(); ok && d != got {
		return &admission.RefusedError{Checks: []admission.Check{{
			Requirement: fmt.Sprintf("inputs[%d].source", i), Verdict: admission.NotGranted, Code: "input-output-corrupt",
			Detail: fmt.Sprintf("the stored copy of output %s hashes to %s", d, got),
			Fix:    "an operator must check the runner's output store; run the stage that produced it again",
		}}}
	}
	return nil
}

// diskNeed is what a launch will write into the state dir's filesystem.
type diskNeed struct{ bytes, inodes int64 }

// spaceReserve is kept free on the state dir's filesystem beyond a launch's
// snapshots: the store must still be able to record the run.
const spaceReserve = 32 << 20

// checkSpace refuses, before any grant is spent, a launch whose input
// snapshots cannot fit on the state dir's filesystem: ENOSPC halfway
// through a snapshot would otherwise be found only after consumption.
func checkSpace(h *host.Runner, need diskNeed) error {
	var st unix.Statfs_t
	if err := unix.Statfs(h.Config().StateDir, &st); err != nil {
		return fmt.Errorf("statfs the state dir: %w", err)
	}
	freeBytes := int64(st.Bavail) * st.Bsize
	freeInodes := int64(st.Ffree)
	if freeBytes >= need.bytes+spaceReserve && (st.Files == 0 || freeInodes >= need.inodes) {
		return nil
	}
	return &admission.RefusedError{Checks: []admission.Check{{
		Requirement: "inputs", Verdict: admission.Unsupported, Code: "state-disk-full",
		Detail: fmt.Sprintf("the input snapshots need %d bytes and %d inodes (plus a %d-byte reserve) on the runner's state filesystem, which has %d bytes and %d inodes free",
			need.bytes, need.inodes, spaceReserve, freeBytes, freeInodes),
		Fix: "an operator must free space on custodyd's stateDir filesystem (custody prunes old outputs per retention), then retry",
	}}}
}

// inputRefusal names why input i could not be read, with a fix that fits
// the reason.
func inputRefusal(i int, err error) error {
	code, fix := "input-snapshot-failed", "make the input readable by the runner"
	req := fmt.Sprintf("inputs[%d]", i)
	var pe *peerUnreadableError
	switch {
	case errors.As(err, &pe):
		// Named by the client's own path, not the descriptor it was read through.
		return &admission.RefusedError{Checks: []admission.Check{{
			Requirement: req + ".source", Verdict: admission.NotGranted, Code: "input-peer-unreadable",
			Detail: pe.Error(), Fix: peerUnreadableFix,
		}}}
	case errors.Is(err, treehash.ErrAvoided):
		req, code, fix = req+".source", "input-verifier-only", "take this input in the pipeline's verifier stage (verifier: true) only, or name a path holding no verifier material: a bind mount or hard link of a verifier root, or of anything in one, is that material"
	case errors.Is(err, treehash.ErrSymlinkComponent):
		code, fix = "input-symlink-component", "name the input by its real path below the policy's input root: custody never follows a symlink from the root to an input"
	case errors.Is(err, treehash.ErrTooLarge):
		code, fix = "input-too-large", "shrink the inputs, or an operator may raise ceilings.inputBytes"
	case errors.Is(err, treehash.ErrUnsupported):
		code, fix = "input-unsupported-file", "inputs hold only regular files, directories and symlinks (copied as links, never followed); remove devices, fifos and sockets, and make the input itself a file or directory"
	}
	return &admission.RefusedError{Checks: []admission.Check{{
		Requirement: req, Verdict: admission.NotGranted, Code: code,
		Detail: err.Error(), Fix: fix,
	}}}
}

// verifierIdentities records, for a phase that is not a verifier phase,
// the identity of everything under the policy's verifier roots, so that
// its input walks refuse that material reached by another path (R8: it
// never reaches generate, a build or an ordinary test). A root that cannot
// be read whole refuses the inputs rather than leaving them unchecked.
func verifierIdentities(ctx context.Context, plan *admission.Plan) (treehash.Identities, error) {
	if len(plan.VerifierRoots) == 0 || len(plan.Inputs) == 0 {
		return nil, nil
	}
	if plan.VerifierIdentities != nil {
		return plan.VerifierIdentities, nil // collected before the spend
	}
	ids, err := treehash.IdentitiesOf(ctx, plan.VerifierRoots)
	if cerr := ctx.Err(); err != nil && cerr != nil {
		return nil, cerr // cancelled: not the roots' fault
	}
	if err != nil {
		return nil, &admission.RefusedError{Checks: []admission.Check{{
			Requirement: "policy.verifierRoots", Verdict: admission.NotGranted, Code: "verifier-roots-unreadable",
			Detail: err.Error(), Fix: "an operator must make every verifier root a readable directory the runner can walk, or remove it from policy verifierRoots"}}}
	}
	plan.VerifierIdentities = ids
	return ids, nil
}

// pinInput, for an input opened as the client, has the walk read it
// through that open and only while it is still the object opened.
func pinInput(p *peerInput, src *string, opts *treehash.Options) {
	if p != nil {
		*src, opts.Beneath, opts.Root, opts.Admit, opts.IndexName = p.source(), p.beneath(), &p.id, p.admit, p.index()
	}
}
