package api_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// custodyd is the real daemon the examples and the contract tests speak
// to: the built binary ($CUSTODYD_BIN), on examples/policy.yaml with the
// busybox test image. Without it the test binary fails: the examples
// cannot skip.
var custodyd *daemontest.Daemon

// openAPIDoc is the submit socket's OpenAPI document, loaded and valid;
// contract checks every exchange of submit against it. controlAPIDoc and
// controlContract are the control socket's, for control.
var (
	openAPIDoc      *openapi3.T
	contract        *checker
	submit          *api.Client
	controlAPIDoc   *openapi3.T
	controlContract *checker
	control         *api.Client
)

// agentLoop is a standing authorization added to the example policy: the
// operator lets ci-bot's submitters run build and test phases on the test
// image without a hand-issued grant each time.
const agentLoop = `
authorizations:
  - name: agent-loop
    actor: ci-bot
    stages: [build, test]
    images: ["@IMAGE@"]
    pipelines: true
    limits: {grantsPerMinute: 1000, concurrentRuns: 4, runsPerDay: 10000}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
`

func TestMain(m *testing.M) {
	os.Exit(daemontest.Main(m, func(t testing.TB) {
		root := testenv.ModuleRoot(t)
		var err error
		if openAPIDoc, err = loadOpenAPI(root, submitDoc); err != nil {
			t.Fatal(err)
		}
		if contract, err = newChecker(openAPIDoc, submitDoc, root); err != nil {
			t.Fatal(err)
		}
		if controlAPIDoc, err = loadOpenAPI(root, controlDoc); err != nil {
			t.Fatal(err)
		}
		if controlContract, err = newChecker(controlAPIDoc, controlDoc, root); err != nil {
			t.Fatal(err)
		}
		d := daemontest.New(t, daemontest.Options{})
		d.Start()
		pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		d.ImportBusybox(context.Background())
		d.WritePolicy(string(pol) + agentLoop)
		if _, err := d.Control.ReloadPolicy(context.Background()); err != nil {
			t.Fatalf("policy reload: %v", err)
		}
		custodyd = d
		submit = api.NewClient(d.SubmitSocket, api.WithTransport(contract.wrap))
		control = api.NewClient(d.ControlSocket, api.WithTransport(controlContract.wrap))
	}))
}
