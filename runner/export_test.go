package runner

import "time"

// SetReprobeEvery lets a test probe again without waiting.
func SetReprobeEvery(r *Runner, d time.Duration) {
	r.reprobe.Lock()
	defer r.reprobe.Unlock()
	r.reprobeEvery = d
}
