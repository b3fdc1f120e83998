package testenv

import (
	"fmt"
	"reflect"
)

// SameDecoding runs a decoder's fast path (with its fallback) and its
// explained path over data, and says how they differ if they do: both
// must refuse, or both accept with deeply equal results.
func SameDecoding[A, B any](data []byte, fast, explained func([]byte) (A, B, error)) error {
	a1, b1, err1 := fast(data)
	a2, b2, err2 := explained(data)
	switch {
	case (err1 == nil) != (err2 == nil):
		return fmt.Errorf("fast path err %v, explained path err %v", err1, err2)
	case err1 == nil && (!reflect.DeepEqual(a1, a2) || !reflect.DeepEqual(b1, b2)):
		return fmt.Errorf("fast path %+v %+v, explained path %+v %+v", a1, b1, a2, b2)
	}
	return nil
}
