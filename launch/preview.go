package launch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/request"
)

// Asker is who a client's dry run answers for: the actor the peer named
// or, when it named none, the actors it submits as.
type Asker struct {
	// Actor is the actor named, or the peer's only one; empty when the
	// peer submits as several and named none.
	Actor string
	// Among are the actors the peer submits as, when Actor is empty.
	Among []string
}

// PreviewAsker is who a client's dry run answers for: the actor it names,
// which the peer must be a submitter of, else the actors the peer submits
// as. A peer that submits as no actor it could name gets one refusal
// whatever it sent (the same for an unknown actor as for another uid's),
// so a dry run tells it nothing a grant it could submit would not.
func (l *Launcher) PreviewAsker(actor string, from Peer) (Asker, error) {
	pol, _, err := l.cfg.Policy()
	if err != nil {
		return Asker{}, err
	}
	var mine []string
	if from.Known {
		mine = pol.SubmitterOf(from.UID, from.GID)
	}
	switch {
	case actor != "" && from.Known && pol.ActorSubmitter(actor, from.UID, from.GID):
		return Asker{Actor: actor}, nil
	case actor != "":
		return Asker{}, notSubmitter(from, fmt.Sprintf("may not submit as actor %q", actor))
	case len(mine) == 0:
		return Asker{}, notSubmitter(from, "is no actor's submitter")
	case len(mine) == 1:
		return Asker{Actor: mine[0]}, nil
	}
	return Asker{Among: mine}, nil
}

func notSubmitter(from Peer, what string) error {
	return &admission.RefusedError{Checks: []admission.Check{{Requirement: "actor", Verdict: admission.NotGranted,
		Code:   string(grant.CodeSubmitterNotAllowed),
		Detail: fmt.Sprintf("uid %d (gid %d) %s, so a dry run on the submit socket answers nothing about this request", from.UID, from.GID, what),
		Fix:    "run the dry run as one of the actor's submitters, or an operator may add this uid or gid to policy actors[].submitters"}}}
}

// Preview is the submit socket's dry run for actor (from PreviewActor):
// Decide as issue would run it for that actor, but without reading any
// host path the request names. A client may not be able to see those
// paths itself, and the runner reads them as root: whether a source
// exists, is a symlink, or how large it is stays for the grant issue to
// find out, on the control socket, where inputs are read and digested.
// Host inputs are checked by their path against the policy's roots only,
// and their checks say so; nothing is hashed.
//
// For an asker of several actors that named none, the actor's stages and
// the earlier outputs it may name are not checked, and a check says so.
func (l *Launcher) Preview(ctx context.Context, req *request.Phase, who Asker, resolvedAtRun ...int) (*admission.Plan, error) {
	actor := who.Actor
	pol, _, err := l.cfg.Policy()
	if err != nil {
		return nil, err
	}
	later, err := laterInputs(req, resolvedAtRun)
	if err != nil {
		return nil, err
	}
	var refused []admission.Check
	if actor != "" {
		refused = refusedOf(actorChecks(pol, req, actor))
	}
	plan, err := admitByPath(l.cfg.Runner, req, pol)
	var re *admission.RefusedError
	if errors.As(err, &re) {
		refused = append(refused, re.Checks...)
	} else if err != nil {
		return nil, err
	}
	creds := credentialChecks(pol, req, l.restrictedEgress(req))
	refused = append(refused, refusedOf(creds)...)
	if plan != nil && actor != "" {
		out, err := l.outputChecks(plan, actor, req.Stage, req.Verifier, later)
		if err != nil {
			return nil, err
		}
		refused = append(refused, out...)
	}
	if plan != nil {
		plan.Checks = append(plan.Checks, creds...)
		if actor == "" {
			plan.Checks = append(plan.Checks, admission.Check{Requirement: "actor", Verdict: admission.Chosen, Code: "actor-unnamed",
				Detail: fmt.Sprintf("this uid submits as %s; the actor's stages and the earlier outputs it may name are checked once one is named (--actor)", strings.Join(who.Among, ", "))})
		}
	}
	if len(refused) > 0 {
		return nil, &admission.RefusedError{Checks: refused}
	}
	for i, in := range plan.Inputs {
		switch _, isOutput := in.OutputDigest(); {
		case later[i]:
			markResolvedAtRun(plan, i)
		case !isOutput:
			markByPath(plan, i)
		default:
			// The runner's own store, not a host path: an output it does
			// not hold is refused now, as at issue.
			var re *admission.RefusedError
			if err := outputInput(l.cfg.Runner, i, in); errors.As(err, &re) {
				refused = append(refused, re.Checks...)
			} else if err != nil {
				return nil, err
			}
		}
	}
	if len(refused) > 0 {
		return nil, &admission.RefusedError{Checks: refused}
	}
	return plan, nil
}

// markByPath says in host input i's check that the dry run judged it by
// its path alone.
func markByPath(plan *admission.Plan, i int) {
	for j, c := range plan.Checks {
		if c.Requirement == fmt.Sprintf("inputs[%d]", i) && !c.Refused() {
			plan.Checks[j].Detail += "; checked by its path only: the runner reads it (no symlinks, within the input budget) and digests it when the grant is issued"
		}
	}
}

// DecideFor is Decide for a grant to actor: the actor's own checks and
// those of the earlier outputs it names are among the refusals, as at
// issue (none for an empty actor). It reads and digests the inputs; it is
// the operator's dry run.
func (l *Launcher) DecideFor(ctx context.Context, req *request.Phase, actor string, resolvedAtRun ...int) (*admission.Plan, []admission.Input, error) {
	pol, _, err := l.cfg.Policy()
	if err != nil {
		return nil, nil, err
	}
	later, err := laterInputs(req, resolvedAtRun)
	if err != nil {
		return nil, nil, err
	}
	if actor == "" {
		return l.decide(ctx, pol, req, nil, later, nil)
	}
	plan, inputs, err := l.decide(ctx, pol, req, actorChecks(pol, req, actor), later, nil)
	if err != nil {
		return nil, nil, err
	}
	if refused, err := l.outputChecks(plan, actor, req.Stage, req.Verifier, later); err != nil {
		return nil, nil, err
	} else if len(refused) > 0 {
		return nil, nil, &admission.RefusedError{Checks: refused}
	}
	return plan, inputs, nil
}
