package oci

import (
	"errors"
	"testing"
)

// TestTransitions checks every state against every operation: exactly the
// moves listed are allowed, and every other one is refused with a
// *StateError that wraps ErrWrongState and leaves the state as it was.
func TestTransitions(t *testing.T) {
	// The moves a Container may make, written out as a reader checks them.
	moves := []struct {
		from state
		op   op
		to   state
	}{
		{statePreparing, opPrepared, statePrepared},
		{statePrepared, opRun, stateRunning},
		{stateRunning, opExit, stateExited},
		{statePreparing, opCleanup, stateCleaned},
		{statePrepared, opCleanup, stateCleaned},
		{stateRunning, opCleanup, stateCleaned},
		{stateExited, opCleanup, stateCleaned},
		{stateRecovering, opCleanup, stateCleaned},
		{stateCleaned, opCleanup, stateCleaned}, // Cleanup is idempotent
	}
	allowed := map[state]map[op]state{}
	for _, m := range moves {
		if allowed[m.from] == nil {
			allowed[m.from] = map[op]state{}
		}
		allowed[m.from][m.op] = m.to
	}
	for s := statePreparing; s <= stateCleaned; s++ {
		for o := opPrepared; o <= opCleanup; o++ {
			c := &Container{id: "table", state: s}
			from, err := c.move(o)
			if from != s {
				t.Errorf("%s from %s: reported leaving %s", o, s, from)
			}
			want, ok := allowed[s][o]
			if ok {
				if err != nil || c.state != want {
					t.Errorf("%s from %s: state %s, err %v; want %s", o, s, c.state, err, want)
				}
				continue
			}
			var se *StateError
			if !errors.Is(err, ErrWrongState) || !errors.As(err, &se) || se.Op != o.String() || se.State != s.String() || se.ID != "table" {
				t.Errorf("%s from %s: err %v, want a *StateError wrapping ErrWrongState", o, s, err)
			}
			if c.state != s {
				t.Errorf("%s from %s: a refused move changed the state to %s", o, s, c.state)
			}
		}
	}
	// Every path ends cleaned: no state is a dead end for Cleanup.
	for s := range allowed {
		if allowed[s][opCleanup] != stateCleaned {
			t.Errorf("cleanup from %s is not allowed", s)
		}
	}
	if len(transitions) != len(allowed) {
		t.Errorf("transitions has %d states, the test knows %d", len(transitions), len(allowed))
	}
}

func TestStateNames(t *testing.T) {
	for s := statePreparing; s <= stateCleaned; s++ {
		if s.String() != stateNames[s] {
			t.Errorf("state %d is %q", s, s.String())
		}
	}
	if state(200).String() != "state(200)" || op(200).String() != "op(200)" {
		t.Error("unknown values are not named by number")
	}
}
