package host

import "time"

// PoolMember is a pooled sandbox as a run's result records it.
type PoolMember struct {
	Profile    string    `json:"profile"`
	Sandbox    string    `json:"sandbox"` // the member's attempt (journal run id)
	PreparedAt time.Time `json:"preparedAt"`
}
