//go:build race

package testenv

// RaceDetector reports whether this test binary was built with -race.
const RaceDetector = true
