package admission

import "encoding/json"

// MarshalJSON writes the plan the way every custody JSON output writes a
// duration: whole milliseconds in a member named …Millis (wallTimeMillis),
// as the grant and the result do, never Go's nanoseconds.
func (p Plan) MarshalJSON() ([]byte, error) {
	type plain Plan // no methods: no recursion
	return json.Marshal(struct {
		plain
		WallTimeMillis int64 `json:"wallTimeMillis"`
	}{plain(p), p.WallTime.Milliseconds()})
}
