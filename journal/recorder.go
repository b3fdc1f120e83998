package journal

import "github.com/custody-dev/custody/backend"

// Recorder is the journal as a backend's Recorder for one attempt (runID):
// each call is one durable record of it, as Intent, Created and Removed.
func (j *Journal) Recorder(runID string) backend.Recorder {
	return &recorder{j: j, runID: runID}
}

type recorder struct {
	j     *Journal
	runID string
}

func (r *recorder) Intent(rs ...backend.Resource) error {
	return r.j.Intent(r.runID, FromBackend(rs)...)
}

func (r *recorder) Created(rs ...backend.Resource) error {
	return r.j.Created(r.runID, FromBackend(rs)...)
}

func (r *recorder) Removed(rs ...backend.Resource) error {
	return r.j.Removed(r.runID, FromBackend(rs)...)
}

// FromBackend are a backend's records as the journal keeps them.
func FromBackend(rs []backend.Resource) []Resource {
	out := make([]Resource, len(rs))
	for i, r := range rs {
		out[i] = Resource{Kind: r.Kind, Name: r.Name, State: r.State, Identity: r.Identity}
	}
	return out
}

// ToBackend are journalled records as a backend gets them back, for
// recovery.
func ToBackend(rs []Resource) []backend.Resource {
	out := make([]backend.Resource, len(rs))
	for i, r := range rs {
		out[i] = backend.Resource{Kind: r.Kind, Name: r.Name, State: r.State, Identity: r.Identity}
	}
	return out
}
