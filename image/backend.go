package image

import "github.com/custody-dev/custody/backend"

// Spec is the sealed file as the backend contract names it, for a launch
// or a pool member; nil for a nil s (an image this process has not
// verified sealed), so a caller passes an image's Sealed as it is.
func (s *Sealed) Spec() *backend.SealedImage {
	if s == nil {
		return nil
	}
	spec := &backend.SealedImage{File: s.File, Identity: s.Identity, Mount: s.Mount}
	if s.layered {
		spec.Layers = s.Layers
	}
	return spec
}
