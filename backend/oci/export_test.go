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

// RuntimeState and RuntimeWaitDone ask b's runtime process directly.
func RuntimeState(ctx context.Context, b *Backend, id string) (*State, error) {
	r, err := runtimeOf(ctx, b)
	if err != nil {
		return nil, err
	}
	return r.state(ctx, id)
}

func RuntimeWaitDone(ctx context.Context, b *Backend, id string) error {
	r, err := runtimeOf(ctx, b)
	if err != nil {
		return err
	}
	return r.waitDone(ctx, id)
}

func runtimeOf(ctx context.Context, b *Backend) (*runc, error) {
	bin, err := b.runtime.get(ctx)
	if err != nil {
		return nil, err
	}
	return b.runtimeFor(bin)
}
