package policy

import (
	"slices"
	"strings"
)

// ActorMayRun reports whether the policy grants actor the stage. A policy
// without actors grants no actor anything.
func (p *Policy) ActorMayRun(actor, stage string) bool {
	i := slices.IndexFunc(p.Actors, func(a Actor) bool { return a.Name == actor })
	return i >= 0 && slices.Contains(p.Actors[i].Stages, stage)
}

// InputAllowed reports whether a phase input may come from hostPath: see
// InputRoot.
func (p *Policy) InputAllowed(hostPath string) bool {
	_, ok := p.InputRoot(hostPath)
	return ok
}

// InputRoot returns the configured root that hostPath lies in, and true, or
// false when no root holds it. Without InputRoots no path is allowed.
// hostPath must be absolute and clean (filepath.Clean leaves it unchanged)
// and be one of the roots or lie below one, segment by segment: /srv/work/a
// is inside /srv/work, /srv/work2 is not. Roots that Validate refuses match
// nothing; of two roots that both hold the path, the longest is returned.
//
// This is the lexical half of the check. The reader must then reach the
// path from the returned root without following any symlink (treehash's
// Options.Beneath), so a link inside the root cannot lead out of it.
func (p *Policy) InputRoot(hostPath string) (string, bool) {
	return rootOf(p.InputRoots, hostPath)
}

// VerifierRoot returns the verifier root hostPath lies in, and true: an
// input only a verifier phase may take (see InputRoot for the matching).
func (p *Policy) VerifierRoot(hostPath string) (string, bool) {
	return rootOf(p.VerifierRoots, hostPath)
}

// VerifierRootWithin returns a verifier root that lies at or below
// hostPath, and true: naming hostPath would take that private material
// with it.
func (p *Policy) VerifierRootWithin(hostPath string) (string, bool) {
	if !cleanAbs(hostPath) {
		return "", false
	}
	for _, root := range p.VerifierRoots {
		if reason, _ := rootProblem(root); reason != "" {
			continue
		}
		if root == hostPath || strings.HasPrefix(root, strings.TrimSuffix(hostPath, "/")+"/") {
			return root, true
		}
	}
	return "", false
}

// rootOf returns the longest valid root of roots that holds hostPath
// lexically, segment by segment, and true; or false.
func rootOf(roots []string, hostPath string) (string, bool) {
	if !cleanAbs(hostPath) {
		return "", false
	}
	best := ""
	for _, root := range roots {
		if reason, _ := rootProblem(root); reason != "" {
			continue
		}
		if (hostPath == root || strings.HasPrefix(hostPath, root+"/")) && len(root) > len(best) {
			best = root
		}
	}
	return best, best != ""
}

// ActorSubmitter reports whether a peer with uid and gid may submit a grant
// issued to actor. An actor without submitters, or an unknown actor, has
// none.
func (p *Policy) ActorSubmitter(actor string, uid, gid uint32) bool {
	i := slices.IndexFunc(p.Actors, func(a Actor) bool { return a.Name == actor })
	if i < 0 {
		return false
	}
	s := p.Actors[i].Submitters
	return slices.Contains(s.UIDs, uid) || slices.Contains(s.GIDs, gid)
}

// SubmitterOf lists the actors a peer with uid and gid may submit as, in
// policy order.
func (p *Policy) SubmitterOf(uid, gid uint32) []string {
	var out []string
	for _, a := range p.Actors {
		if p.ActorSubmitter(a.Name, uid, gid) {
			out = append(out, a.Name)
		}
	}
	return out
}

// ActorHasSubmitters reports whether anyone at all may submit as actor.
func (p *Policy) ActorHasSubmitters(actor string) bool {
	i := slices.IndexFunc(p.Actors, func(a Actor) bool { return a.Name == actor })
	return i >= 0 && len(p.Actors[i].Submitters.UIDs)+len(p.Actors[i].Submitters.GIDs) > 0
}

// AllowsCredential reports whether the operator binds a credential with
// this name (for some stage).
func (p *Policy) AllowsCredential(name string) bool {
	_, ok := p.Credentials[name]
	return ok
}

// CredentialFor returns the binding of credential name if stage may use
// it.
func (p *Policy) CredentialFor(stage, name string) (Credential, bool) {
	c, ok := p.Credentials[name]
	if !ok || !slices.Contains(c.Stages, stage) {
		return Credential{}, false
	}
	return c, true
}

// EgressAllowed reports whether a phase of stage may be granted the
// destination host:port, exactly as listed.
func (p *Policy) EgressAllowed(stage, destination string) bool {
	return slices.Contains(p.Egress.Stages[stage], destination)
}
