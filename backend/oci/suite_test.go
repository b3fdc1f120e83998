package oci_test

import (
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
)

// TestBackendContract runs the one suite of the backend contract against
// real runc, with and without a user namespace.
func TestBackendContract(t *testing.T) {
	for _, userns := range []bool{true, false} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			backendtest.Suite(t, func(t *testing.T) backendtest.Fixture {
				h := newHarness(t, userns)
				return backendtest.Fixture{Backend: h.b, Spec: func(args ...string) backend.Spec { return h.spec(args...) }}
			})
		})
	}
}
