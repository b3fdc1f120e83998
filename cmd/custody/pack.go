package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/quote"
)

// maxComposeSend bounds the compose file the pack commands send: the pack
// loader's own bound (1 MiB), which also keeps the request, base64 and
// all, under custodyd's body limit.
const maxComposeSend = 1 << 20

// usageError is a command line custody cannot act on: exit 64.
func usageError(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, args...)}
}

// cmdName is a command's path without "custody", which the error line
// already begins with.
func cmdName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// usageArgs makes an argument validator's refusal a usage error.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return &exitError{exitUsage, fmt.Errorf("%s: %w", cmdName(cmd), err)}
		}
		return nil
	}
}

// required refuses, as a usage error, a flag left empty.
func required(cmd *cobra.Command, flags ...string) error {
	for _, name := range flags {
		if f := cmd.Flags().Lookup(name); f != nil && f.Value.String() == "" {
			return usageError("%s: --%s is required", cmdName(cmd), name)
		}
	}
	return nil
}

// packGroup is a command that only holds subcommands: run bare or with an
// unknown subcommand, it is a usage error (not help and exit 0).
func packGroup(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, RunE: func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError("%s: unknown command %s (see %s --help)", cmdName(cmd), quote.String(args[0]), cmd.CommandPath())
		}
		return usageError("%s: name a command (see %s --help)", cmdName(cmd), cmd.CommandPath())
	}}
}

func (a *app) packCmd() *cobra.Command {
	cmd := packGroup("pack", "Scenario packs (compose files) on custodyd's Docker engine: admit, grant, up, status, down, recover")
	// Every flag error under pack (unknown flag, bad value) is a usage
	// error; subcommands inherit this.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{exitUsage, fmt.Errorf("%s: %w", cmdName(c), err)}
	})
	grant := packGroup("grant", "Issue pack grants (operator, control socket)")
	grant.AddCommand(a.packIssueCmd())
	cmd.AddCommand(a.packAdmitCmd(), grant, a.packUpCmd(), a.packStatusCmd(), a.packDownCmd(), a.packRecoverCmd())
	return cmd
}

// readPack reads a compose file as custodyd needs it: the exact bytes and
// the absolute directory its bind sources are resolved against. custodyd
// parses it; the CLI does not, so the bytes judged are the bytes read.
func readPack(path string) (api.PackSource, error) {
	data, err := readFile("compose file", path, maxComposeSend)
	if err != nil {
		return api.PackSource{}, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return api.PackSource{}, &exitError{exitRefused, fmt.Errorf("compose file %s: %w", quote.String(path), err)}
	}
	if data == nil {
		data = []byte{}
	}
	return api.PackSource{Compose: data, Dir: filepath.Dir(abs)}, nil
}

// packFail turns a daemon error into an exit and one message. A refusal's
// requirements go to stderr one line each (requirement, verdict, reason,
// fix); the message then only counts them, so no prefix is said twice.
// Under --json the error also goes to stdout as {"error": ...}.
func (a *app) packFail(op string, asJSON bool, err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) {
		// custodyd could not be asked. A socket this uid may not open is
		// a refusal (2); an absent or dead daemon could not run it (3).
		code, wire := exitInternal, api.CodeInternal
		if errors.Is(err, fs.ErrPermission) {
			code, wire = exitRefused, api.CodeForbidden
		}
		if asJSON {
			_ = writeJSON(a.stdout, map[string]any{"error": &api.Error{Code: wire, Message: err.Error()}})
		}
		return &exitError{code, fmt.Errorf("%s: %w", op, err)}
	}
	if asJSON {
		_ = writeJSON(a.stdout, map[string]any{"error": ae})
	}
	code := exitRefused
	if ae.Code == api.CodeQuarantined || ae.Code == api.CodeInternal {
		code = exitInternal
	}
	if len(ae.Checks) == 0 {
		return &exitError{code, packMessage{op, ae}}
	}
	n := printRefused(a.stderr, ae.Checks)
	return &exitError{code, packMessage{op, &api.Error{Code: ae.Code, Checks: ae.Checks,
		Message: fmt.Sprintf("refused: %d requirement(s) not granted (listed above)", n)}}}
}

// packMessage prints as "OP: MESSAGE" and unwraps to the wire error.
type packMessage struct {
	op  string
	err *api.Error
}

func (m packMessage) Error() string { return m.op + ": " + m.err.Message }
func (m packMessage) Unwrap() error { return m.err }

// printRefused prints the refused checks, one line each, and counts them.
// refused reports whether a check refuses its requirement.
func refused(c api.Check) bool { return c.Verdict == "unsupported" || c.Verdict == "not-granted" }

// refusedCount is how many of checks refuse their requirement.
func refusedCount(checks []api.Check) int {
	n := 0
	for _, c := range checks {
		if refused(c) {
			n++
		}
	}
	return n
}

func printRefused(w io.Writer, checks []api.Check) int {
	n := 0
	for _, c := range checks {
		if !refused(c) {
			continue
		}
		n++
		fmt.Fprintf(w, "%s  %s: %s", quote.String(c.Requirement), quote.String(c.Verdict), quote.Message(c.Detail))
		if c.Fix != "" {
			fmt.Fprintf(w, "; fix: %s", quote.Message(c.Fix))
		}
		fmt.Fprintln(w)
	}
	return n
}

// loadFlags adds --profile and --project-name, which choose what a
// compose file leaves to its caller, as docker compose's flags do; they
// fill in src.
func loadFlags(fs *pflag.FlagSet, src *api.PackSource) {
	fs.StringSliceVar(&src.Profiles, "profile", nil, "select a compose profile (repeat, or separate with commas): services whose profiles: name none of the selected ones are left out, and the grant binds the selection")
	fs.StringVar(&src.ProjectName, "project-name", "", "the project name of a compose file without a top-level name: (default: the compose file's directory name)")
}

// withLoad is src with the load options the flags gave.
func withLoad(src api.PackSource, opts api.PackSource) api.PackSource {
	src.Profiles, src.ProjectName = opts.Profiles, opts.ProjectName
	return src
}

func (a *app) packAdmitCmd() *cobra.Command {
	var actor string
	var asJSON, operator bool
	var load api.PackSource
	cmd := &cobra.Command{
		Use:   "admit COMPOSE.yaml [--actor NAME] [--profile NAME]... [--project-name NAME] [--operator] [--json]",
		Short: "Dry run: the plan with every choice made, or every refused requirement (grants nothing)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := readPack(args[0])
			if err != nil {
				return err
			}
			resp, err := a.client(operator).PackAdmit(cmd.Context(), api.PackAdmitRequest{Pack: withLoad(src, load), Actor: actor})
			if err != nil {
				return a.packFail("pack admit", asJSON, err)
			}
			if asJSON {
				if err := writeJSON(a.stdout, resp); err != nil {
					return err
				}
			} else {
				printChecks(a.stdout, 40, resp.Checks)
				if resp.HostRootEquivalent {
					fmt.Fprintf(a.stdout, "HOST-ROOT-EQUIVALENT: %s\n", quote.Message(strings.Join(resp.HostRootReasons, "; ")))
				}
			}
			if !resp.Admitted {
				return &exitError{exitRefused, fmt.Errorf("pack admit: refused: %d requirement(s) not granted (listed above)", refusedCount(resp.Checks))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "the actor the plan is for (a packs.actors name in the policy)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verdict as JSON")
	cmd.Flags().BoolVar(&operator, "operator", false, "use the control socket: inspect bind sources and build contexts as a grant issue does "+
		"(a client's dry run judges them by their path only, and answers only a submitter of the actor)")
	loadFlags(cmd.Flags(), &load)
	return cmd
}

func (a *app) packIssueCmd() *cobra.Command {
	var actor, ttl string
	var load api.PackSource
	cmd := &cobra.Command{
		Use:   "issue COMPOSE.yaml --actor NAME [--ttl 1h] [--profile NAME]... [--project-name NAME]",
		Short: "Mint a signed single-use grant for one up of the pack; prints the DSSE envelope",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := required(cmd, "actor", "ttl"); err != nil {
				return err
			}
			src, err := readPack(args[0])
			if err != nil {
				return err
			}
			env, err := a.control().PackIssueGrant(cmd.Context(), api.PackIssueRequest{Pack: withLoad(src, load), Actor: actor, TTL: ttl})
			if err != nil {
				return a.packFail("pack grant issue", false, err)
			}
			_, err = a.stdout.Write(append(env, '\n'))
			return err
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "who the grant is for (a packs.actors name in the policy; required)")
	cmd.Flags().StringVar(&ttl, "ttl", "1h", "how long the grant is valid")
	loadFlags(cmd.Flags(), &load)
	return cmd
}

// socketFlag adds --operator: use the control socket, where an operator
// acts on every workspace.
func socketFlag(fs *pflag.FlagSet, operator *bool) {
	fs.BoolVar(operator, "operator", false, "use the control socket (operators: any workspace)")
}

func (a *app) client(operator bool) *api.Client {
	if operator {
		return a.control()
	}
	return a.submit()
}

func (a *app) packUpCmd() *cobra.Command {
	var grantPath, workspace, receiptPath string
	var asJSON, operator bool
	cmd := &cobra.Command{
		Use:   "up --grant GRANT.json --workspace NAME [--receipt out/up.json] [--json]",
		Short: "Realize a granted pack as a workspace; its signed receipt lists every native ID created",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "grant", "workspace"); err != nil {
				return err
			}
			if err := freshReceipt(receiptPath); err != nil {
				return err
			}
			env, err := readGrant(grantPath)
			if err != nil {
				return err
			}
			rep, err := a.client(operator).PackUp(cmd.Context(), api.PackUpRequest{Grant: env, Workspace: workspace})
			return a.packDone("pack up", rep, err, receiptPath, asJSON, "")
		},
	}
	cmd.Flags().StringVar(&grantPath, "grant", "", "the `GRANT.json` envelope custody pack grant issue printed (required)")
	cmd.Flags().StringVar(&workspace, "workspace", "", "the workspace's name, [a-z0-9][a-z0-9-]{0,31} (required)")
	cmd.Flags().StringVar(&receiptPath, "receipt", "", "write the signed up receipt here (and its Sigstore bundle beside it as *.sigstore.json); refused if either exists")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace report as JSON")
	socketFlag(cmd.Flags(), &operator)
	return cmd
}

func (a *app) packDownCmd() *cobra.Command {
	var workspace, receiptPath string
	var asJSON, operator, volumes, children bool
	cmd := &cobra.Command{
		Use:   "down --workspace NAME [--volumes] [--children --operator] [--receipt out/down.json] [--json]",
		Short: "Tear a workspace down (idempotent): its containers and networks, and its volumes only with --volumes",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required(cmd, "workspace"); err != nil {
				return err
			}
			if err := freshReceipt(receiptPath); err != nil {
				return err
			}
			rep, err := a.client(operator).PackDownWith(cmd.Context(), workspace, api.PackDownRequest{Volumes: volumes, Children: children})
			kept := ""
			if !volumes {
				kept = "volumes kept (pass --volumes to remove them too)"
			}
			return a.packDone("pack down", rep, err, receiptPath, asJSON, kept)
		},
	}
	cmd.Flags().StringVar(&workspace, "workspace", "", "the workspace to tear down (required)")
	cmd.Flags().BoolVar(&volumes, "volumes", false, "also remove the workspace's volumes (their data is lost)")
	cmd.Flags().BoolVar(&children, "children", false, "operators: also remove the engine-socket holders' children attached only to this workspace's networks "+
		"(custody cannot prove it owns them: check custody pack status first); without it they are left and the workspace stays residual")
	cmd.Flags().StringVar(&receiptPath, "receipt", "", "write the signed down receipt here (and its Sigstore bundle beside it); refused if either exists")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workspace report as JSON")
	socketFlag(cmd.Flags(), &operator)
	return cmd
}

// freshReceipt refuses, before anything is asked of custodyd, a receipt
// path (or its bundle's) that already holds a file: a receipt must never
// sit beside evidence of another operation.
func freshReceipt(path string) error {
	if path == "" {
		return nil
	}
	for _, p := range []string{path, bundlePath(path)} {
		if _, err := os.Lstat(p); err == nil {
			return &exitError{exitRefused, fmt.Errorf("refused: %s already exists, and a receipt is never written over another; fix: choose a new --receipt path", quote.String(p))}
		}
	}
	return nil
}

// packDone reports an up or a down: it writes the receipt and bundle when
// asked, prints the report, and picks the exit — 0 when the workspace is
// in the state the operation promised, 1 when it ran, failed and left
// nothing behind, 3 when it left the workspace cleanup-pending or
// residual; a refusal before any change (no report) is 2.
func (a *app) packDone(op string, rep *api.PackReport, err error, receiptPath string, asJSON bool, note string) error {
	if rep == nil {
		return a.packFail(op, asJSON, err)
	}
	var saveErr error
	if receiptPath != "" {
		saveErr = a.savePackReceipt(rep, receiptPath)
	}
	if asJSON {
		if werr := writeJSON(a.stdout, rep); werr != nil {
			return werr
		}
	} else {
		printWorkspace(a.stdout, rep)
		if note != "" {
			fmt.Fprintln(a.stdout, "  "+note)
		}
	}
	switch {
	case rep.State == api.WorkspaceCleanupPending || rep.State == api.WorkspaceResidual:
		return &exitError{exitInternal, fmt.Errorf("%s: workspace %s is %s; fix: custody pack recover (operator), then custody pack status",
			op, quote.String(rep.Workspace), rep.State)}
	case err != nil:
		return &exitError{exitFailed, fmt.Errorf("%s: %s", op, quote.Message(rep.Error.Message))}
	case saveErr != nil:
		return &exitError{exitInternal, fmt.Errorf("%s: %w", op, saveErr)}
	}
	return nil
}

// savePackReceipt writes a report's receipt and its bundle, each a new
// file (never over an existing one).
func (a *app) savePackReceipt(rep *api.PackReport, path string) error {
	if len(rep.Receipt) == 0 {
		return fmt.Errorf("no receipt was issued for workspace %s", quote.String(rep.Workspace))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{path, rep.Receipt}, {bundlePath(path), rep.Bundle}} {
		if err := writeNew(f.path, append(append([]byte{}, f.data...), '\n')); err != nil {
			return err
		}
	}
	fmt.Fprintf(a.stderr, "custody: receipt %s, bundle %s (check: custody verify %s --trust TRUST --compose COMPOSE.yaml)\n",
		quote.String(path), quote.String(bundlePath(path)), quote.String(path))
	return nil
}

func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (a *app) packStatusCmd() *cobra.Command {
	var workspace string
	var asJSON, operator bool
	cmd := &cobra.Command{
		Use:   "status [--workspace NAME] [--json]",
		Short: "Each workspace's state (clean, running, cleanup-pending, residual) and every resource in it",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := a.client(operator)
			var reps []api.PackReport
			var out any
			if workspace != "" {
				rep, err := c.PackStatus(cmd.Context(), workspace)
				if err != nil {
					return a.packFail("pack status", asJSON, err)
				}
				reps, out = []api.PackReport{*rep}, rep
			} else {
				list, err := c.PackList(cmd.Context())
				if err != nil {
					return a.packFail("pack status", asJSON, err)
				}
				reps, out = list.Workspaces, list
			}
			return a.reports("pack status", asJSON, out, reps, "no workspaces")
		},
	}
	cmd.Flags().StringVar(&workspace, "workspace", "", "one workspace (default: every one you may see)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	socketFlag(cmd.Flags(), &operator)
	return cmd
}

// reports prints workspace reports (out as JSON, or each report, or
// empty when there are none) and exits 3 when one is unfinished.
func (a *app) reports(op string, asJSON bool, out any, reps []api.PackReport, empty string) error {
	if asJSON {
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		if len(reps) == 0 {
			fmt.Fprintln(a.stdout, empty)
		}
		for i := range reps {
			printWorkspace(a.stdout, &reps[i])
		}
	}
	return unfinished(op, reps)
}

// unfinished is exit 3 when a workspace is cleanup-pending or residual.
func unfinished(op string, reps []api.PackReport) error {
	var left []string
	for _, r := range reps {
		if r.State == api.WorkspaceCleanupPending || r.State == api.WorkspaceResidual {
			left = append(left, quote.String(r.Workspace)+" is "+r.State)
		}
	}
	if len(left) > 0 {
		return &exitError{exitInternal, fmt.Errorf("%s: %s; fix: custody pack recover (operator)", op, strings.Join(left, ", "))}
	}
	return nil
}

func (a *app) packRecoverCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "recover [--json]",
		Short: "Operator: owned retry of cleanup for every cleanup-pending or residual workspace",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec, err := a.control().PackRecover(cmd.Context())
			if err != nil {
				return a.packFail("pack recover", asJSON, err)
			}
			return a.reports("pack recover", asJSON, rec, rec.Workspaces, "nothing to recover")
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printWorkspace prints a workspace for a person: its state, then per
// resource what is there, then what a down covers. Every string came from
// the daemon, many from the pack, so each goes through quote.
func printWorkspace(w io.Writer, r *api.PackReport) {
	q := quote.String
	fmt.Fprintf(w, "workspace %s (project %s, id %s): %s", q(r.Workspace), q(r.Project), q(r.ID), q(r.State))
	if r.Owner != nil {
		fmt.Fprintf(w, ", owner uid %d", *r.Owner)
	}
	fmt.Fprintln(w)
	for _, res := range r.Resources {
		printResource(w, "", res)
	}
	for _, res := range r.Foreign {
		printResource(w, "foreign (not ours, untouched) ", res)
	}
	for _, res := range r.Children {
		printResource(w, "child (made through the engine socket) ", res)
	}
	if r.Detail != "" {
		fmt.Fprintf(w, "  detail    %s\n", quote.Message(r.Detail))
	}
	if r.Retry != "" {
		fmt.Fprintf(w, "  retry     %s\n", quote.Message(r.Retry))
	}
	if len(r.Covered) > 0 {
		fmt.Fprintf(w, "  down covers %s\n", q(strings.Join(r.Covered, ", ")))
	}
	if r.Error != nil {
		fmt.Fprintf(w, "  error     %s\n", quote.Message(r.Error.Message))
	}
}

func printResource(w io.Writer, prefix string, res api.PackResource) {
	id := res.ID
	if len(id) > 12 {
		id = id[:12]
	}
	fmt.Fprintf(w, "  %s%-9s %-32s %-12s %s", prefix, quote.String(res.Kind), quote.String(res.Name), quote.String(id), quote.String(res.State))
	if res.Detail != "" {
		fmt.Fprintf(w, " — %s", quote.Message(res.Detail))
	}
	fmt.Fprintln(w)
}
