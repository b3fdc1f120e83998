// Command custody is the operator and client CLI of the custody runner.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/quote"
)

// exitError carries a process exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

type app struct {
	controlSocket string
	submitSocket  string
	stdout        io.Writer
	stderr        io.Writer
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal cancels ctx, which every command waits on; the
	// second one, should a command still be stuck, terminates the process.
	go func() { <-ctx.Done(); stop() }()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "custody",
		Short:         "Run untrusted work under a pinned runtime with operator-granted authority",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.controlSocket, "control", envOr("CUSTODY_CONTROL_SOCKET", api.DefaultControlSocket), "custodyd control socket (operators)")
	root.PersistentFlags().StringVar(&a.submitSocket, "submit", envOr("CUSTODY_SUBMIT_SOCKET", api.DefaultSubmitSocket), "custodyd submit socket (clients)")
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(a.doctorCmd(), a.imageCmd(), a.admitCmd(), a.grantCmd(), a.runCmd(),
		a.cancelCmd(), a.resultCmd(), a.statusCmd(), a.recoverCmd(), a.verifyCmd(), a.promoteCmd(), a.policyCmd(), a.schemaCmd(), a.quarantineCmd(), a.qualifyCmd(), a.gateCmd(), a.packCmd())
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	// Errors carry daemon messages and names from requests and workloads;
	// quote.Lines keeps each line of them from acting on the terminal.
	fmt.Fprintln(stderr, "custody:", quote.Lines(err.Error()))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
