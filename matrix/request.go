package matrix

// SignRequest is what an operator sends to custodyd's control socket
// (api.Client.SignQualification) to have a row signed with the runner
// identity key: the suite's verdicts. Everything else in the row — the platform, the runtime, the
// custody version, the runner, the time, the runs' recorded status and
// receipt digests, and the result — the daemon derives itself.
type SignRequest struct {
	Tier         string         `json:"tier"`
	SuiteVersion string         `json:"suiteVersion"`
	Checks       []RequestCheck `json:"checks"`
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
