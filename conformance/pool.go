package conformance

import (
	"encoding/base64"
	"encoding/json"

	"github.com/custody-dev/custody/predicate"
)

// PooledChecks are the checks a pooled suite (Env.Pooled) runs by
// default: every check whose phases ask for the budgets PooledBudgets
// lists (privilege isolation and the memory, pids and wall-time limits
// among them), so that a warm pool of those profiles serves every one of
// their runs. The output, tmp, scratch and cpu bounds ask for budgets of
// their own and run cold.
var PooledChecks = []string{
	FamilyInput + "/read-input",
	FamilyInput + "/write-input-refused",
	FamilyInput + "/changed-after-issue-refused",
	FamilyInput + "/rootfs-read-only",
	FamilyOutput + "/output-kept-by-digest",
	FamilyEnvironment + "/declared-variable-visible",
	FamilyEnvironment + "/ambient-variables-absent",
	FamilyEnvironment + "/minimal-devices-work",
	FamilyEnvironment + "/host-devices-absent",
	FamilyEgress + "/loopback-works",
	FamilyEgress + "/host-listener-unreachable",
	FamilyCleanup + "/detached-child-runs",
	FamilyCleanup + "/detached-child-gone-after-exit",
	FamilyCleanup + "/detached-child-gone-after-timeout",
	FamilyEvidence + "/genuine-receipt-verifies",
	FamilyEvidence + "/tampered-receipt-rejected",
	FamilyIsolation + "/ordinary-operations-work",
	FamilyIsolation + "/privileged-syscalls-refused",
	FamilyIsolation + "/no-capabilities",
	FamilyIsolation + "/own-namespaces",
	FamilyBudgets + "/memory-within-budget",
	FamilyBudgets + "/memory-hog-oom-killed",
	FamilyBudgets + "/pids-within-budget",
	FamilyBudgets + "/wall-time-within-budget",
	FamilyBudgets + "/wall-time-exceeded-killed",
}

// PooledBudgets are the memory and pids budgets of PooledChecks' phases
// (every other budget is the operator's default): a pool profile for each
// serves them.
var PooledBudgets = []struct{ Memory, Pids int64 }{{64 * mib, 64}, {32 * mib, 64}}

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
