package matrix

// SignRequest is what an operator sends to custodyd's control socket
// (api.Client.SignQualification) to have a row signed with the runner
// identity key: the suite's verdicts. Everything else in the row — the platform, the runtime, the
// custody version, the runner, the time, the runs' recorded status and
// receipt digests, and the result — the daemon derives itself.
type SignRequest struct {
	Tier string `json:"tier"`
	// Backend names the backend the suite ran on (backend.Backend.Name);
	// empty is the runner's default backend. The row qualifies that
	// backend only, and every run it names must have run on it.
	Backend      string         `json:"backend,omitempty"`
	SuiteVersion string         `json:"suiteVersion"`
	Checks       []RequestCheck `json:"checks"`
	// NotApplicable are the suite's checks that do not apply to the
	// backend, each with why; they are listed in the row, never passed.
	NotApplicable []NotApplicable `json:"notApplicable,omitempty"`
}

// RequestCheck is one check's verdict as the suite judged it, with the ids
// of the runs it launched on this daemon.
type RequestCheck struct {
	Family string   `json:"family"`
	Name   string   `json:"name"`
	Case   string   `json:"case"`
	Passed bool     `json:"passed"`
	Detail string   `json:"detail"`
	Runs   []string `json:"runs"`
}
