package oci

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSealsByCopy(t *testing.T) {
	d := t.TempDir()
	for _, p := range []string{"opt/custody", "opt/bin", "var/state"} {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"opt/custody/runc", "opt/bin/runc"} {
		if err := os.WriteFile(filepath.Join(d, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(d, "opt/custody/runc"), filepath.Join(d, "var/runc-link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		runtime, state string
		want           bool
	}{
		{"opt/custody/runc", "opt/custody/state", true},     // the state dir below the runtime's dir
		{"opt/custody/runc", "opt/custody", true},           // the runtime's dir itself
		{"var/runc-link", "opt/custody/state", true},        // through a link to the runtime, as runc resolves itself
		{"opt/bin/runc", "opt/custody/state", false},        // siblings
		{"opt/bin/runc", "opt", false},                      // the state dir above the runtime's dir
		{"opt/custody/runc", "opt/custodyd-state", false},   // a name prefix is not a parent
		{"opt/custody/missing", "opt/custody/state", false}, // unresolvable: says nothing
	} {
		state := filepath.Join(d, c.state)
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		if got := sealsByCopy(filepath.Join(d, c.runtime), state); got != c.want {
			t.Errorf("sealsByCopy(%s, %s) = %v, want %v", c.runtime, c.state, got, c.want)
		}
	}
}
