package backendtest_test

import (
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
)

// TestFakeContract runs the one suite of the backend contract against the
// in-memory Fake: what it enforces is checked, and what it does not
// enforce it must not claim.
func TestFakeContract(t *testing.T) {
	backendtest.Suite(t, func(t *testing.T) backendtest.Fixture {
		f, err := backendtest.NewFake(backendtest.FakeOptions{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return backendtest.Fixture{Backend: f, Spec: func(args ...string) backend.Spec {
			return backend.Spec{
				Rootfs: "/", Args: args, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/", Hostname: "fake",
				OutputPath: "/out", OutputBytes: 4 << 20, OutputFiles: 64, TmpBytes: 8 << 20,
				Memory: 64 << 20, Pids: 64, CPU: 1, FileSize: 4 << 20,
			}
		}}
	})
}

// TestFakeEngineContract runs the pack engine suite against the in-memory
// FakeEngine.
func TestFakeEngineContract(t *testing.T) {
	backendtest.EngineSuite(t, func(t *testing.T) backendtest.EngineFixture {
		return backendtest.EngineFixture{Engine: backendtest.NewFakeEngine(), Image: "fake", Subnet: "10.213.0.0/24"}
	})
}
