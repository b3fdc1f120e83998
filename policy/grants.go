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

// InputAllowed reports whether a phase input may come from hostPath.
//
// When InputRoots is empty there is no restriction on where inputs live, and
// it returns true for every path. Otherwise hostPath must be absolute and
// clean (filepath.Clean leaves it unchanged) and be one of the roots or lie
// below one, segment by segment: /srv/work/a is inside /srv/work, /srv/work2
// is not. Roots that Validate refuses match nothing.
//
// The check is lexical. It does not resolve symbolic links, so whatever
// reads the input must not follow a link out of the root.
func (p *Policy) InputAllowed(hostPath string) bool {
	if len(p.InputRoots) == 0 {
		return true
	}
	if !cleanAbs(hostPath) {
		return false
	}
	return slices.ContainsFunc(p.InputRoots, func(root string) bool {
		if reason, _ := rootProblem(root); reason != "" {
			return false
		}
		return hostPath == root || strings.HasPrefix(hostPath, root+"/")
	})
}

// AllowsCredential reports whether the operator may grant the credential
// with this name.
func (p *Policy) AllowsCredential(name string) bool {
	return slices.Contains(p.Credentials, name)
}
