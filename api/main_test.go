package api_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// custodyd is the real daemon the examples and the contract tests speak
// to: the built binary ($CUSTODYD_BIN), on examples/policy.yaml with the
// busybox test image. Without it the test binary fails: the examples
// cannot skip.
var custodyd *daemontest.Daemon

func TestMain(m *testing.M) {
	os.Exit(daemontest.Main(m, func(t testing.TB) {
		d := daemontest.New(t, daemontest.Options{})
		d.Start()
		pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		d.ImportBusybox(context.Background())
		d.WritePolicy(string(pol))
		if _, err := d.Control.ReloadPolicy(context.Background()); err != nil {
			t.Fatalf("policy reload: %v", err)
		}
		custodyd = d
	}))
}

// submitClient is a client of the real daemon's submit socket, every
// exchange of which is checked against the OpenAPI document.
func submitClient() *api.Client { return custodyd.Submit }
