package conformance

import (
	"encoding/base64"
	"encoding/json"

	"github.com/custody-dev/custody/predicate"
)

// PooledChecks are the checks a pooled suite (Env.Pooled) runs by
// default: every check of the host suite but the restricted-egress ones,
// whose sandboxes are never pooled (a run's proxy and CA are its own).
// Each of their phases asks for one of the budget sets PooledBudgets
// lists, so that a warm pool of those profiles serves every run.
var PooledChecks = pooledChecks()

// pooledChecks is the host suite's checks (specs: the restricted-egress
// ones are apart, in restrictedEgressSpecs), in report order.
func pooledChecks() []string {
	var out []string
	for _, sp := range specs() {
		out = append(out, sp.family+"/"+sp.name)
	}
	return out
}

// PoolBudget is one budget set of PooledChecks' phases, as the phase
// resolves it: a field a phase leaves unset is the qualification policy's
// default (cpu 1, tmp 16Mi, output 16Mi) or the suite's (memory 64Mi,
// pids 64).
type PoolBudget struct {
	Memory, Pids          int64
	CPU                   float64
	TmpBytes, OutputBytes int64
}

// PooledBudgets are the budget sets of PooledChecks' phases: a pool
// profile for each serves them.
var PooledBudgets = []PoolBudget{
	{Memory: 64 * mib, Pids: 64, CPU: 1, TmpBytes: 16 * mib, OutputBytes: 16 * mib},   // most checks
	{Memory: 32 * mib, Pids: 64, CPU: 1, TmpBytes: 16 * mib, OutputBytes: 16 * mib},   // memory-hog
	{Memory: 64 * mib, Pids: 16, CPU: 1, TmpBytes: 16 * mib, OutputBytes: 16 * mib},   // fork-bomb
	{Memory: 64 * mib, Pids: 64, CPU: 0.5, TmpBytes: 16 * mib, OutputBytes: 16 * mib}, // cpu-quota
	{Memory: 64 * mib, Pids: 64, CPU: 0.2, TmpBytes: 16 * mib, OutputBytes: 16 * mib}, // cpu-burn
	{Memory: 64 * mib, Pids: 64, CPU: 1, TmpBytes: 2 * mib, OutputBytes: 16 * mib},    // tmp
	{Memory: 64 * mib, Pids: 64, CPU: 1, TmpBytes: 2 * mib, OutputBytes: mib},         // output bound, scratch, writable mounts
}

// pooledRun says whether a run's receipt records a pooled sandbox (v5).
func pooledRun(env []byte) bool {
	var e struct{ Payload string }
	if json.Unmarshal(env, &e) != nil {
		return false
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		return false
	}
	var st struct {
		PredicateType string `json:"predicateType"`
		Predicate     struct {
			Pooled *struct {
				PreparedAt string `json:"preparedAt"`
			} `json:"pooled"`
		} `json:"predicate"`
	}
	return json.Unmarshal(payload, &st) == nil && st.PredicateType == predicate.ReceiptV5 && st.Predicate.Pooled != nil && st.Predicate.Pooled.PreparedAt != ""
}
