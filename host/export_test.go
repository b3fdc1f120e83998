package host

import "time"

// SetReprobeEvery lets a test probe again without waiting.
func SetReprobeEvery(r *Runner, d time.Duration) {
	r.reprobe.Lock()
	defer r.reprobe.Unlock()
	r.reprobeEvery = d
}

// SetPoolKeepClean lets a test prune pool members beyond n clean ones.
func SetPoolKeepClean(r *Runner, n int) { r.pool = r.newPool(n) }
