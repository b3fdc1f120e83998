//go:build !linux

package image

import "errors"

// Sealing needs Linux: these are never reached, since sealed.Mount fails
// first.
func attach(int, string) (string, func(), error) {
	return "", nil, errors.New("sealed images need Linux")
}

func closeMount(int) {}

func sameMetadata(a, b string, _ bool) error { return errors.New("sealed images need Linux") }

func dupMount(int) (int, error) { return -1, errors.New("sealed images need Linux") }

func cloneMount(int) (int, error) { return -1, errors.New("sealed images need Linux") }

func layerSource(string, *layerInfo, string, string) error {
	return errors.New("sealed images need Linux")
}

func roOverlay([]int) (int, error) { return -1, errors.New("sealed images need Linux") }
