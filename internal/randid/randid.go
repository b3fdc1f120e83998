// Package randid makes random identifiers: run and grant ids, nonces and
// names of temporary things, as lowercase hex.
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// New returns n bytes from crypto/rand as 2n lowercase hex digits.
func New(n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never returns an error: it crashes the program
	// instead, as an id that is not random must never be handed out.
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
