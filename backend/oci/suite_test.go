package oci_test

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
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
				return backendtest.Fixture{Backend: h.b, Spec: func(args ...string) backend.Spec { return h.spec(args...) },
					State: func() string { return treeState(filepath.Dir(h.stateDir)) }}
			})
		})
	}
}

// treeState lists what the backend's state and runtime directories hold,
// two levels down: the containers' state and launch dirs a failing case
// left.
func treeState(base string) string {
	var b strings.Builder
	_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(base, p)
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", rel, err)
			return nil
		}
		if strings.Count(rel, string(filepath.Separator)) >= 2 && d.IsDir() {
			return fs.SkipDir
		}
		fmt.Fprintf(&b, "  %s\n", rel)
		return nil
	})
	return b.String()
}
