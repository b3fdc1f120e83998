package runner

// BackendName is the name of the backend this runner launches on
// (backend.Backend.Name): what a qualification row of this runner
// qualifies.
func (r *Runner) BackendName() string { return r.backend.Name() }
