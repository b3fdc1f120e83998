package oci

import "context"

// EncodeGoAhead lets the external tests compute the go-ahead a pooled
// launch sends, to check the receipt's evidence of it.
var EncodeGoAhead = encodeGoAhead

// SetSealedProbe replaces the probe of sealed mounts (sealed.ProbeOverlay)
// before b's first Capabilities, to act as a kernel that cannot.
func SetSealedProbe(b *Backend, probe func(ctx context.Context, dir string, idmap func(string) (int, error)) error) {
	b.sealedProbe = probe
}
