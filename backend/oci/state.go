package oci

import (
	"errors"
	"fmt"
	"strings"
)

// ErrWrongState is wrapped by every refusal of an operation that the
// container's lifecycle state does not allow, such as a second Run or a
// Run after Cleanup. Nothing is created by a refused operation.
var ErrWrongState = errors.New("operation not allowed in the container's state")

// StateError is one such refusal: which operation, in which state.
type StateError struct {
	ID    string
	Op    string
	State string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("container %s: cannot %s a container that is %s: %v", e.ID, e.Op, e.State, ErrWrongState)
}

func (e *StateError) Unwrap() error { return ErrWrongState }

// state is where a Container is in its life. A Container made by Prepare
// starts in statePreparing, one rebuilt from a dead runner's journal in
// stateRecovering; every path ends in stateCleaned.
type state uint8

const (
	statePreparing  state = iota // Prepare is making its resources, or failed to
	statePrepared                // every resource made, runc not started
	stateRunning                 // the runtime's run started: it may have made state and cgroups, even if it failed
	stateExited                  // Run has returned
	stateRecovering              // rebuilt from the journal of a runner that died
	stateCleaned                 // Cleanup has run
)

var stateNames = [...]string{"preparing", "prepared", "running", "exited", "recovering", "cleaned"}

func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// op is an operation that moves a Container between states.
type op uint8

const (
	opPrepared op = iota // Prepare made everything
	opRun                // Run starts runc
	opExit               // Run returns
	opCleanup            // Cleanup begins
)

var opNames = [...]string{"finish preparing", "run", "exit", "clean up"}

func (o op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// transitions is every allowed move, in one place: an operation missing
// from a state's row is refused. Cleanup is allowed from every state and
// again once cleaned: it is idempotent, and a failed Prepare or Run still
// needs it.
var transitions = map[state]map[op]state{
	statePreparing:  {opPrepared: statePrepared, opCleanup: stateCleaned},
	statePrepared:   {opRun: stateRunning, opCleanup: stateCleaned},
	stateRunning:    {opExit: stateExited, opCleanup: stateCleaned},
	stateExited:     {opCleanup: stateCleaned},
	stateRecovering: {opCleanup: stateCleaned},
	stateCleaned:    {opCleanup: stateCleaned},
}

// next is the state o leads to from s, or a *StateError.
func next(id string, s state, o op) (state, error) {
	to, ok := transitions[s][o]
	if !ok {
		return s, &StateError{ID: id, Op: o.String(), State: s.String()}
	}
	return to, nil
}

// move applies o to the container's state and returns the state it left.
func (c *Container) move(o op) (state, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	from := c.state
	to, err := next(c.id, from, o)
	if err != nil {
		return from, err
	}
	c.state = to
	return from, nil
}

// runtimeMayHold says whether runc may hold state or cgroups of this
// container when a cleanup begins in state from: once the runtime's run was started
// (even if its start failed), or, in recovery, when the dead runner's
// journal holds the runtime container.
func (c *Container) runtimeMayHold(from state) bool {
	switch from {
	case stateRunning, stateExited:
		return true
	case stateRecovering:
		return c.recorded(KindContainer)
	}
	return false
}

// ownsDir says whether the launch dir's removal is to be journalled: a
// Container made by Prepare exists only once its dir was made; in recovery
// only a dir the journal still holds is.
func (c *Container) ownsDir(from state) bool {
	return from != stateRecovering || c.recorded(KindLaunchDir)
}

// recorded says whether idents holds a resource of kind. In recovery,
// idents holds every resource the journal has not recorded removed, with
// an identity or not.
func (c *Container) recorded(kind string) bool {
	for k := range c.idents {
		if strings.HasPrefix(k, kind+"\x00") {
			return true
		}
	}
	return false
}
