// Package layout holds the tests that enforce custody's package boundaries:
// which package may import which, and that every package says what it is
// for. It has no code of its own.
package layout
