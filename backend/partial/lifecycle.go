package partial

import "sync"

// Lifecycle is a sandbox's state, moved only through one table of the
// moves each state allows, as the oci backend keeps its containers': an
// operation missing from a state's row is refused and changes nothing.
// Cleanup belongs in every row (it is idempotent, and a failed Prepare or
// Run still needs it).
type Lifecycle[S, O comparable] struct {
	mu    sync.Mutex
	state S
	moves map[S]map[O]S
}

// NewLifecycle starts a lifecycle in start under the table moves.
func NewLifecycle[S, O comparable](start S, moves map[S]map[O]S) *Lifecycle[S, O] {
	return &Lifecycle[S, O]{state: start, moves: moves}
}

// Move applies o: it returns the state it left, and false (the state
// unchanged) when the table does not allow o there.
func (l *Lifecycle[S, O]) Move(o O) (from S, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from = l.state
	to, ok := l.moves[from][o]
	if ok {
		l.state = to
	}
	return from, ok
}

// State is the state the lifecycle is in.
func (l *Lifecycle[S, O]) State() S {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}
