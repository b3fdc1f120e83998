// Package journal records what the runner is about to create before it
// creates it, the native identity of what it created, and what it removed.
// After a failure, cancellation or restart the journal says, per attempt,
// whether its state is clean, cleanup-pending or residual, and recovery
// acts only on resources whose record and native identity both match.
package journal

import (
	"errors"
	"fmt"
	"slices"
	"time"

	// encoding/json/v2 (its go-json-experiment mirror): a launch updates
	// its attempt three times, each a decode and an encode inside the
	// journal's transaction, and v2 does both in a good part less time.
	json "github.com/go-json-experiment/json"
	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/store"
)

// State is an attempt's cleanup state.
type State string

const (
	// Running: resources may exist and the runner is using them.
	Running State = "running"
	// CleanupPending: the attempt ended (or its runner died) and cleanup
	// has not been verified yet.
	CleanupPending State = "cleanup-pending"
	// Clean: every recorded resource is verified gone.
	Clean State = "clean"
	// Residual: something recorded is still there (or could not be
	// verified); Retry says how to retry the owned cleanup.
	Residual State = "residual"
)

// Resource states.
const (
	Intent  = "intent"  // about to be created; may or may not exist
	Created = "created" // exists, with the recorded identity
	Removed = "removed" // verified gone
)

var (
	// ErrNotFound means no attempt has that run id.
	ErrNotFound = errors.New("attempt not found")
	// ErrNotOwned means a resource's native identity does not match the
	// journal: it is not ours to touch.
	ErrNotOwned = errors.New("resource not owned by this attempt")
)

// Resource is one native resource of an attempt.
type Resource struct {
	Kind     string            `json:"kind"`
	Name     string            `json:"name"`
	State    string            `json:"state"`
	Identity map[string]string `json:"identity,omitempty"`
	At       time.Time         `json:"at"`
}

// Attempt is the journal of one launch attempt.
type Attempt struct {
	RunID     string     `json:"runId"`
	GrantID   string     `json:"grantId,omitempty"`
	State     State      `json:"state"`
	Resources []Resource `json:"resources"`
	// Detail says what remains or what went wrong; Retry says how an
	// operator retries the owned cleanup.
	Detail string `json:"detail,omitempty"`
	Retry  string `json:"retry,omitempty"`
	// Member, on a run that took a warm-pool sandbox, is the pool member's
	// attempt: it holds the native resources the run used, so the run's
	// cleanup state is never cleaner than the member's.
	Member  string    `json:"member,omitempty"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
}

// Outstanding lists resources that are not verified removed.
func (a *Attempt) Outstanding() []Resource {
	var out []Resource
	for _, r := range a.Resources {
		if r.State != Removed {
			out = append(out, r)
		}
	}
	return out
}

// Journal writes attempt records into the runner's store. Every call is
// one fsync'd transaction: an intent is durable before the create it
// guards.
type Journal struct {
	db     *store.DB
	bucket string
	now    func() time.Time
}

// New returns a journal over db.
func New(db *store.DB) *Journal { return NewIn(db, store.Journal) }

// NewIn returns a journal over one bucket of db: pack workspaces keep
// theirs in store.PackJournal, apart from the phase runner's, whose
// recovery hands every unfinished attempt to the phase backend (a pack
// workspace stays running for as long as it is up).
func NewIn(db *store.DB, bucket string) *Journal {
	return &Journal{db: db, bucket: bucket, now: func() time.Time { return time.Now().UTC() }}
}

// Begin opens the record of a new attempt in state running, with the
// intents of what it is about to create, in one durable transaction.
func (j *Journal) Begin(runID, grantID string, intents ...Resource) error {
	return j.db.Update(j.bucket, j.begin(runID, grantID, "", intents))
}

// Bucket is the store bucket the journal writes.
func (j *Journal) Bucket() string { return j.bucket }

// BeginConsuming is Begin in the transaction that consumes the attempt's
// grant (store.ConsumeGrantWith): the grant is used exactly when its
// attempt, with everything the launch may create, is on record.
func (j *Journal) BeginConsuming(runID, grantID string, use store.GrantUse, intents ...Resource) error {
	return j.db.ConsumeGrantWith(grantID, use, j.bucket, j.begin(runID, grantID, "", intents))
}

// BeginServing is BeginConsuming for a run that takes the sandbox of pool
// member's attempt: the run's attempt names the member (Attempt.Member),
// in the same transaction that spends the grant.
func (j *Journal) BeginServing(runID, grantID, member string, use store.GrantUse) error {
	return j.db.ConsumeGrantWith(grantID, use, j.bucket, j.begin(runID, grantID, member, nil))
}

func (j *Journal) begin(runID, grantID, member string, intents []Resource) func(b *bolt.Bucket) error {
	now := j.now()
	return func(b *bolt.Bucket) error {
		if b.Get([]byte(runID)) != nil {
			return fmt.Errorf("journal: attempt %s already exists", runID)
		}
		a := &Attempt{RunID: runID, GrantID: grantID, Member: member, State: Running, Resources: []Resource{}, Started: now, Updated: now}
		for _, r := range intents {
			a.Resources = append(a.Resources, Resource{Kind: r.Kind, Name: r.Name, State: Intent, At: now})
		}
		return put(b, a)
	}
}

// Intent records that each resource (kind and name) is about to be
// created, all in one durable transaction, with the identity it will be
// found by (an intent nonce label) if it has one. An identity-less intent
// of the same kind and name that Begin recorded is filled in, not
// repeated, so that it does not stay outstanding forever.
func (j *Journal) Intent(runID string, rs ...Resource) error {
	return j.update(runID, func(a *Attempt) error {
		for _, r := range rs {
			if i := a.find(r.Kind, r.Name); i >= 0 && a.Resources[i].State == Intent && a.Resources[i].Identity == nil {
				a.Resources[i].Identity, a.Resources[i].At = r.Identity, j.now()
				continue
			}
			a.Resources = append(a.Resources, Resource{Kind: r.Kind, Name: r.Name, State: Intent, Identity: r.Identity, At: j.now()})
		}
		return nil
	})
}

// Created records the native identity of each resource once it exists.
func (j *Journal) Created(runID string, rs ...Resource) error {
	return j.update(runID, func(a *Attempt) error {
		for _, r := range rs {
			i := a.find(r.Kind, r.Name)
			if i < 0 {
				return fmt.Errorf("journal: %s %s created without a recorded intent", r.Kind, r.Name)
			}
			a.Resources[i].State, a.Resources[i].Identity, a.Resources[i].At = Created, r.Identity, j.now()
		}
		return nil
	})
}

// Removed records that each resource is verified gone.
func (j *Journal) Removed(runID string, rs ...Resource) error {
	return j.update(runID, func(a *Attempt) error {
		for _, r := range rs {
			if i := a.find(r.Kind, r.Name); i >= 0 {
				a.Resources[i].State, a.Resources[i].At = Removed, j.now()
			}
		}
		return nil
	})
}

// Finish sets an attempt's state, first recording the resources in removed
// as verified gone, in the same transaction. Clean is refused while a
// resource is outstanding: unknown cleanup is never reported as success.
func (j *Journal) Finish(runID string, state State, detail, retry string, removed ...Resource) error {
	return j.FinishRecording(runID, nil, state, detail, retry, removed...)
}

// FinishRecording is Finish that also stores the caller's run records in
// the same transaction: one durable write where there would be two.
func (j *Journal) FinishRecording(runID string, runs []store.RunRecord, state State, detail, retry string, removed ...Resource) error {
	return j.update(runID, func(a *Attempt) error {
		for _, r := range removed {
			if i := a.find(r.Kind, r.Name); i >= 0 {
				a.Resources[i].State, a.Resources[i].At = Removed, j.now()
			}
		}
		if state == Clean {
			if left := a.Outstanding(); len(left) > 0 {
				return fmt.Errorf("journal: attempt %s cannot be clean with %d outstanding resources", runID, len(left))
			}
		}
		a.State, a.Detail, a.Retry = state, detail, retry
		return nil
	}, runs...)
}

// Get returns one attempt.
func (j *Journal) Get(runID string) (*Attempt, error) {
	var a *Attempt
	err := j.db.View(j.bucket, func(b *bolt.Bucket) error {
		v := b.Get([]byte(runID))
		if v == nil {
			return fmt.Errorf("journal: %s: %w", runID, ErrNotFound)
		}
		a = &Attempt{}
		return json.Unmarshal(v, a)
	})
	return a, err
}

// List returns every attempt, oldest first.
func (j *Journal) List() ([]Attempt, error) {
	var out []Attempt
	err := j.db.View(j.bucket, func(b *bolt.Bucket) error {
		return b.ForEach(func(_, v []byte) error {
			var a Attempt
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			out = append(out, a)
			return nil
		})
	})
	slices.SortFunc(out, func(a, b Attempt) int { return a.Started.Compare(b.Started) })
	return out, err
}

// Unfinished returns the attempts that are not clean.
func (j *Journal) Unfinished() ([]Attempt, error) {
	all, err := j.List()
	if err != nil {
		return nil, err
	}
	var out []Attempt
	for _, a := range all {
		if a.State != Clean {
			out = append(out, a)
		}
	}
	return out, nil
}

// Known returns every kind/name any attempt recorded, keyed by Key.
func (j *Journal) Known() (map[string]bool, error) {
	all, err := j.List()
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, a := range all {
		for _, r := range a.Resources {
			known[Key(r.Kind, r.Name)] = true
		}
	}
	return known, nil
}

// Key is the key of kind/name in Known.
func Key(kind, name string) string { return kind + "\x00" + name }

func (j *Journal) update(runID string, fn func(a *Attempt) error, runs ...store.RunRecord) error {
	return j.db.Update(j.bucket, func(b *bolt.Bucket) error {
		v := b.Get([]byte(runID))
		if v == nil {
			return fmt.Errorf("journal: %s: %w", runID, ErrNotFound)
		}
		var a Attempt
		if err := json.Unmarshal(v, &a); err != nil {
			return err
		}
		if err := fn(&a); err != nil {
			return err
		}
		a.Updated = j.now()
		return put(b, &a)
	}, runs...)
}

func (a *Attempt) find(kind, name string) int {
	for i := len(a.Resources) - 1; i >= 0; i-- {
		if a.Resources[i].Kind == kind && a.Resources[i].Name == name {
			return i
		}
	}
	return -1
}

func put(b *bolt.Bucket, a *Attempt) error {
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return b.Put([]byte(a.RunID), v)
}

// Settle records an attempt that created nothing (its runner stopped
// between consuming the grant and journalling the launch) as clean.
func (j *Journal) Settle(runID, grantID, detail string) error {
	now := j.now()
	return j.db.Update(j.bucket, func(b *bolt.Bucket) error {
		if b.Get([]byte(runID)) != nil {
			return nil
		}
		return put(b, &Attempt{RunID: runID, GrantID: grantID, State: Clean, Resources: []Resource{},
			Detail: detail, Started: now, Updated: now})
	})
}

// DeleteClean removes the records of the named attempts that are clean
// with nothing outstanding, in one durable transaction, and returns how
// many it removed. Each state is read again inside the transaction: an
// attempt that is not clean (residual, or reopened) is always kept, as is
// one not found. It is for records that carry no evidence, such as warm
// pool members verified destroyed.
func (j *Journal) DeleteClean(runIDs ...string) (int, error) {
	n := 0
	err := j.db.Update(j.bucket, func(b *bolt.Bucket) error {
		n = 0
		for _, id := range runIDs {
			v := b.Get([]byte(id))
			if v == nil {
				continue
			}
			// A record that does not decode is not known to be clean: it is
			// kept, and the others are still pruned.
			var a Attempt
			if json.Unmarshal(v, &a) != nil || a.State != Clean || len(a.Outstanding()) > 0 {
				continue
			}
			if err := b.Delete([]byte(id)); err != nil {
				return fmt.Errorf("journal: delete %s: %w", id, err)
			}
			n++
		}
		return nil
	})
	return n, err
}
