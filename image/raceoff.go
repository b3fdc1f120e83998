//go:build !race

package image

// raceEnabled says the race detector is on (see boundMemory).
const raceEnabled = false
