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
	"github.com/spf13/pflag"

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
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
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
	// An error no command classified is custody failing to do its part,
	// never a run that ran and failed (1).
	return exitInternal
}

// usageEverywhere makes every command line custody cannot act on exit 64
// (exitUsage), for every command: an unknown command or flag, a bad flag
// value, wrong arguments, a required flag left out, a command group run
// without a command. Cobra reports these as plain errors, which would
// exit 1, the code of a run that ran and failed.
func usageEverywhere(root *cobra.Command) {
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if !c.HasParent() {
			return &exitError{exitUsage, err}
		}
		return &exitError{exitUsage, fmt.Errorf("%s: %w", cmdName(c), err)}
	})
	// The root takes any arguments so that an unknown command reaches the
	// group handler below instead of cobra's own error.
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError("unknown command %s (see custody --help)", quote.String(args[0]))
		}
		return usageError("name a command (see custody --help)")
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
			c.RunE = packGroup(c.Use, c.Short).RunE
		}
		if v := c.Args; v != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				err := v(cmd, args)
				var ee *exitError
				if err != nil && !errors.As(err, &ee) {
					err = &exitError{exitUsage, fmt.Errorf("%s: %w", cmdName(cmd), err)}
				}
				return err
			}
		}
		var need []string
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Annotations[cobra.BashCompOneRequiredFlag] != nil {
				delete(f.Annotations, cobra.BashCompOneRequiredFlag)
				need = append(need, f.Name)
			}
		})
		if run := c.RunE; run != nil && len(need) > 0 {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if err := required(cmd, need...); err != nil {
					return err
				}
				return run(cmd, args)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// rootCmd is the command tree, with every usage error exiting 64.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "custody",
		Short:         "Run untrusted work under a pinned runtime with operator-granted authority",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.controlSocket, "control", envOr("CUSTODY_CONTROL_SOCKET", api.DefaultControlSocket), "custodyd control socket (operators)")
	root.PersistentFlags().StringVar(&a.submitSocket, "submit", envOr("CUSTODY_SUBMIT_SOCKET", api.DefaultSubmitSocket), "custodyd submit socket (clients)")
	root.AddCommand(a.doctorCmd(), a.imageCmd(), a.admitCmd(), a.grantCmd(), a.runCmd(),
		a.cancelCmd(), a.resultCmd(), a.logsCmd(), a.trustCmd(), a.statusCmd(), a.recoverCmd(), a.verifyCmd(), a.promoteCmd(), a.policyCmd(), a.schemaCmd(), a.quarantineCmd(), a.qualifyCmd(), a.gateCmd(), a.packCmd(), a.pipelineCmd(), a.digestCmd(), a.revokeCmd(), a.oplogCmd(), a.docsCmd(), a.authorizationsCmd(), a.authorizationCmd())
	usageEverywhere(root)
	return root
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
