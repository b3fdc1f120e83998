package launch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
)

// MintTTL is how long a grant minted under a standing authorization is
// valid: it is redeemed at once, in the request that minted it.
const MintTTL = time.Minute

// Minted is a grant minted under a standing authorization.
type Minted struct {
	Envelope []byte
	GrantID  string
	// Authorization and PolicyDigest name the authorization and the
	// policy it was minted under.
	Authorization, PolicyDigest string
	// inputs are the host inputs as the client opened them at the mint:
	// the redeem reads them through these (RedeemMinted), not by path.
	inputs map[int]*peerInput
}

// Close releases the inputs the mint opened; RedeemMinted closes them
// itself. A nil Minted may be closed.
func (m *Minted) Close() {
	if m != nil {
		closeInputs(m.inputs)
		m.inputs = nil
	}
}

// MintRequest is a client's request to run a phase under a standing
// authorization.
type MintRequest struct {
	Phase         *request.Phase
	Authorization string
	From          Peer
	// Pipeline says the phase is a stage of a pipeline run.
	Pipeline bool
	// InForce, if set, refuses an authorization the caller no longer
	// honours (one an operator revoked); it is asked of the very
	// definition the mint then uses.
	InForce func(*policy.Authorization) error
}

// Mint decides a phase under a standing authorization: exactly the
// decision of an operator's grant issue for the authorization's actor,
// with the envelope's checks counted among its refusals (what the request
// asks for, before any host input is read; what admission planned, after),
// then a single-use grant bound as an issued one, valid for MintTTL.
// Nothing is minted on any refusal. The caller has already found the
// authorization in force and not revoked, and the peer one of its actor's
// submitters (AuthorizationFor).
func (l *Launcher) Mint(ctx context.Context, in MintRequest) (*Minted, error) {
	pol, polDig, err := l.cfg.Policy()
	if err != nil {
		return nil, err
	}
	a, err := AuthorizationFor(pol, in.Authorization, in.From)
	if err != nil {
		return nil, err
	}
	if in.InForce != nil {
		if err := in.InForce(a); err != nil {
			return nil, err
		}
	}
	first := RequestEnvelope(a, in.Phase, in.Pipeline, l.cfg.Now())
	if refused := refusedOf(first); len(refused) > 0 {
		return nil, &admission.RefusedError{Checks: refused}
	}
	// Host inputs are read only once they lie within the envelope, and
	// only through what the peer opened itself: custodyd reads as root,
	// and must not read on a client's behalf what the client could not,
	// nor follow a path the client changes after the check.
	var pinned map[int]*peerInput
	kept := false
	defer func() {
		if !kept {
			closeInputs(pinned)
		}
	}()
	pin := func(plan *admission.Plan) (map[int]*peerInput, []admission.Check) {
		var checks []admission.Check
		pinned, checks = peerOpen(plan, in.From)
		l.fault("mint-inputs-opened")
		return pinned, checks
	}
	env, p, err := l.issue(ctx, pol, polDig, in.Phase, a.Actor, MintTTL, nil, pin,
		func(plan *admission.Plan) []admission.Check { return PlanEnvelope(a, pol, plan) })
	if err != nil {
		return nil, err
	}
	kept = true
	return &Minted{Envelope: env, GrantID: p.ID, Authorization: a.Name, PolicyDigest: polDig, inputs: pinned}, nil
}

// ErrAuthorizationUnknown is a request naming an authorization the policy
// in force does not have (or an operator revoked).
type ErrAuthorizationUnknown struct{ Name string }

func (e *ErrAuthorizationUnknown) Error() string {
	return fmt.Sprintf("authorization %q is not in force on this runner (the policy has none by that name, or an operator revoked it); fix: list the ones you may use with custody authorizations", e.Name)
}

// AuthorizationFor returns the policy's authorization name for a peer
// that submits as its actor: an unknown name is *ErrAuthorizationUnknown,
// a peer that may not use it is refused as a grant would be.
func AuthorizationFor(pol *policy.Policy, name string, from Peer) (*policy.Authorization, error) {
	a, ok := pol.Authorization(name)
	if !ok {
		return nil, &ErrAuthorizationUnknown{Name: name}
	}
	if !from.Known || !pol.ActorSubmitter(a.Actor, from.UID, from.GID) {
		return nil, &NotSubmitterError{Authorization: name, From: from}
	}
	return a, nil
}

// NotSubmitterError is a peer asking to use an authorization whose actor
// it does not submit as.
type NotSubmitterError struct {
	Authorization string
	From          Peer
}

func (e *NotSubmitterError) Error() string {
	return fmt.Sprintf("uid %d (gid %d) may not use authorization %q: it is not a submitter of the authorization's actor; fix: an operator may add this uid or gid to the actor's submitters in the policy", e.From.UID, e.From.GID, e.Authorization)
}

// envelopeCheck is one dimension of the authorization's envelope, named
// authorization.<field>.
func envelopeCheck(field string, ok bool, detail, fix string) admission.Check {
	c := admission.Check{Requirement: "authorization." + field, Verdict: admission.Granted, Code: "authorization-" + field, Detail: detail}
	if !ok {
		c.Verdict, c.Fix = admission.NotGranted, fix
	}
	return c
}

// RequestEnvelope checks what a phase asks for against the authorization,
// before admission or any read: the window, the stage, verifier and
// pipeline use, the credentials, and each host input's root.
func RequestEnvelope(a *policy.Authorization, req *request.Phase, pipeline bool, now time.Time) []admission.Check {
	checks := []admission.Check{
		envelopeCheck("notAfter", a.Valid(now), fmt.Sprintf("the authorization mints from %s until %s; it is %s",
			a.NotBefore.UTC().Format(time.RFC3339), a.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)),
			"ask the operator to renew the authorization's validity window"),
		envelopeCheck("stages", slices.Contains(a.Stages, string(req.Stage)), fmt.Sprintf("stage %q; the authorization mints %v", req.Stage, a.Stages),
			"ask for one of the authorization's stages, or for a grant from the operator"),
	}
	if strings.HasPrefix(req.Image, "sha256:") {
		// By digest: refused before admission reads the image store; by
		// name, the plan's digest is checked (PlanEnvelope).
		checks = append(checks, envelopeCheck("images", slices.Contains(a.Images, req.Image), fmt.Sprintf("image %s; the authorization mints %v", req.Image, a.Images),
			"ask for one of the authorization's images"))
	}
	if req.Verifier {
		checks = append(checks, envelopeCheck("verifier", a.Verifier, "a verifier stage", "the authorization does not mint verifier stages; ask the operator for a grant"))
	}
	if pipeline {
		checks = append(checks, envelopeCheck("pipelines", a.Pipelines, "a pipeline stage", "the authorization does not mint pipeline stages; run the phase alone, or ask the operator"))
	}
	for _, c := range req.Credentials {
		checks = append(checks, envelopeCheck("credentials", slices.Contains(a.Credentials, c), fmt.Sprintf("credential %q; the authorization allows %v", c, a.Credentials),
			"ask only for the authorization's credentials"))
	}
	for i, in := range req.Inputs {
		if _, ok := in.OutputDigest(); ok {
			continue
		}
		_, ok := a.InputRoot(in.Source)
		checks = append(checks, envelopeCheck("inputRoots", ok, fmt.Sprintf("inputs[%d].source %s; the authorization reads inputs only under %v", i, in.Source, a.InputRoots),
			"move the input under one of the authorization's input roots"))
	}
	return checks
}

// PlanEnvelope checks what admission planned against the authorization:
// the image, every resource and output ceiling, and the egress.
func PlanEnvelope(a *policy.Authorization, pol *policy.Policy, plan *admission.Plan) []admission.Check {
	c := a.Effective(pol.Ceilings)
	within := func(field string, got, ceiling int64, unit string) admission.Check {
		return envelopeCheck("ceilings."+field, got <= ceiling, fmt.Sprintf("%s %d%s; the authorization's ceiling is %d%s", field, got, unit, ceiling, unit),
			fmt.Sprintf("ask for at most %d%s", ceiling, unit))
	}
	checks := []admission.Check{
		envelopeCheck("images", slices.Contains(a.Images, plan.Image), fmt.Sprintf("image %s; the authorization mints %v", plan.Image, a.Images),
			"ask for one of the authorization's images"),
		within("memory", plan.Memory, int64(c.Memory), " bytes"),
		within("pids", plan.Pids, c.Pids, ""),
		envelopeCheck("ceilings.cpu", plan.CPU <= c.CPU, fmt.Sprintf("cpu %v; the authorization's ceiling is %v", plan.CPU, c.CPU), fmt.Sprintf("ask for at most %v cores", c.CPU)),
		within("wallTime", plan.WallTime.Milliseconds(), time.Duration(c.WallTime).Milliseconds(), " ms"),
		within("outputBytes", plan.OutputBytes, int64(c.OutputBytes), " bytes"),
		within("outputFiles", plan.OutputFiles, c.OutputFilesCeiling(), ""),
		within("tmpBytes", plan.TmpBytes, int64(c.TmpBytes), " bytes"),
		within("nofile", plan.Nofile, c.Nofile, ""),
	}
	for _, d := range plan.Egress {
		checks = append(checks, envelopeCheck("egress", slices.Contains(a.Egress, d), fmt.Sprintf("egress to %s; the authorization allows %v", d, a.Egress),
			"ask only for the authorization's egress destinations"))
	}
	return checks
}
