package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/quote"
	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/pipeline"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1  // the workload ran and failed, timed out, was OOM-killed or cancelled
	exitRefused  = 2  // refused before anything ran
	exitInternal = 3  // the runner could not run or clean up, or is quarantined
	exitUsage    = 64 // the command line is wrong (sysexits EX_USAGE); nothing was asked
)

func (a *app) control() *api.Client { return api.NewClient(a.controlSocket) }
func (a *app) submit() *api.Client  { return api.NewClient(a.submitSocket) }

// fail maps an error asking custodyd to the exit table, with one message:
// a refusal's requirements go to stderr one line each (the printer custody
// pack uses), a socket this uid may not open is refused (2), an absent
// daemon is 3.
func (a *app) fail(cmd *cobra.Command, err error) error {
	return a.packFail(cmdName(cmd), false, err)
}

// envelopeSlack is what a file may hold around an envelope: the newline
// `custody grant issue` writes, or an editor's.
const envelopeSlack = 4 << 10

// maxPlatformSize bounds a platform description file (custody gate
// --platform FILE); one is a few kilobytes.
const maxPlatformSize = 1 << 20

// readFile reads a file the CLI was pointed at: only a regular file of at
// most limit bytes, so a FIFO, a device or a directory is refused at once
// (naming its type and the fix) instead of blocking or flooding the CLI.
// Every file the CLI reads itself goes through here or through a package
// loader that uses regfile too (trust files, keys, matrix rows).
func readFile(what, path string, limit int64) ([]byte, error) {
	data, err := regfile.ReadFile(path, limit)
	if err != nil {
		return nil, &exitError{exitRefused, fmt.Errorf("refused: read %s: %w", what, err)}
	}
	return data, nil
}

// readPhase reads a phase file as the daemon needs it: the exact bytes and
// the directory its relative inputs are resolved against. It is parsed
// locally first so that a malformed request never leaves this machine; the
// bytes parsed are the bytes sent.
func readPhase(path string) (api.PhaseSource, error) {
	data, err := readFile("phase request", path, request.MaxSize)
	if err != nil {
		return api.PhaseSource{}, err
	}
	if _, err := request.Parse(data); err != nil {
		return api.PhaseSource{}, &exitError{exitRefused, fmt.Errorf("refused: %s: %w", path, err)}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return api.PhaseSource{}, err
	}
	return api.PhaseSource{YAML: data, BaseDir: filepath.Dir(abs)}, nil
}

func (a *app) imageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Manage the runner's content-addressed images (operator)"}
	var asJSON bool
	imp := &cobra.Command{
		Use:   "import DIR|TAR|docker-archive:TAR|oci:DIR[:TAG]|oci-archive:TAR",
		Short: "Import a rootfs (directory or tar, plain, gzip, zstd or xz) or an image (docker save, OCI layout or archive)",
		Long: `Import a rootfs directory or tar (plain, gzip, zstd or xz), a docker-save
archive (docker-archive:TAR), an OCI image layout (oci:DIR[:TAG]) or an OCI
archive (oci-archive:TAR) as a content-addressed image, and print its digest.
Device nodes and fifos are skipped and listed on stderr.`,
		Args: cobra.ExactArgs(1),
		RunE: a.jsonRunE(&asJSON, func(cmd *cobra.Command, args []string) error {
			src, err := absSource(args[0])
			if err != nil {
				return err
			}
			raw, err := a.control().ImportImage(cmd.Context(), src)
			if err != nil {
				return a.fail(cmd, err)
			}
			if asJSON {
				// One JSON document per line, as every --json output.
				_, err := a.stdout.Write(append(bytes.TrimRight(raw, "\n"), '\n'))
				return err
			}
			var img struct {
				Digest   string
				Skipped  []string
				Unsealed string
			}
			if err := json.Unmarshal(raw, &img); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, quote.String(img.Digest))
			if len(img.Skipped) > 0 {
				fmt.Fprintf(a.stderr, "skipped %d device nodes and fifos (the runner makes its own /dev):\n", len(img.Skipped))
				for _, sk := range img.Skipped {
					fmt.Fprintln(a.stderr, "  "+quote.String(sk))
				}
			}
			if img.Unsealed != "" {
				fmt.Fprintln(a.stderr, "not sealed (each launch walks every entry of the image): "+quote.String(img.Unsealed))
			}
			return nil
		}),
	}
	imp.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(imp, a.imageListCmd(), a.imageInspectCmd(), a.imageRmCmd(), a.imagePruneCmd())
	return cmd
}

// imageListCmd lists the stored images: digest, source, files and bytes,
// and the manifest and config digests an image import bound.
func (a *app) imageListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the runner's stored images (operator)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := a.control().Images(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			if asJSON {
				_, err := a.stdout.Write(append(raw, '\n'))
				return err
			}
			var imgs []struct {
				Digest, Source, Manifest, ConfigDigest string
				Files                                  int
				Bytes                                  int64
			}
			if err := json.Unmarshal(raw, &imgs); err != nil {
				return err
			}
			for _, img := range imgs {
				fmt.Fprintf(a.stdout, "%s  %d files  %d bytes  %s\n", quote.String(img.Digest), img.Files, img.Bytes, quote.String(img.Source))
				if img.ConfigDigest != "" {
					fmt.Fprintf(a.stdout, "  manifest %s  config %s\n", quote.String(img.Manifest), quote.String(img.ConfigDigest))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// imageInspectCmd prints one stored image's record, found by its tree
// digest or the manifest (or config) digest it was imported by.
func (a *app) imageInspectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect DIGEST",
		Short: "Print a stored image's record as JSON: config, layers, owners, skipped entries (operator)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.control().InspectImage(cmd.Context(), args[0])
			if err != nil {
				return a.fail(cmd, err)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, raw, "", "  "); err != nil {
				return err
			}
			out.WriteByte('\n')
			_, err = a.stdout.Write(out.Bytes())
			return err
		},
	}
	cmd.Flags().Bool("json", true, "print JSON (the only form)")
	return cmd
}

// imageTransports are the prefixes of an image source that is not a rootfs
// (the image store parses them; the CLI may not import it).
var imageTransports = []string{"docker-archive:", "oci-archive:", "oci:"}

// absSource makes the path of an image source absolute, since the daemon
// resolves paths from its own directory. The path of a prefixed source is
// joined below the working directory as is: the store splits an OCI tag off
// it and cleans it.
func absSource(arg string) (string, error) {
	for _, p := range imageTransports {
		if rest, ok := strings.CutPrefix(arg, p); ok {
			if filepath.IsAbs(rest) || rest == "" {
				return arg, nil
			}
			wd, err := os.Getwd()
			if err != nil {
				return "", err
			}
			return p + wd + "/" + rest, nil
		}
	}
	return filepath.Abs(arg)
}

func (a *app) admitCmd() *cobra.Command {
	var asJSON, operator bool
	var actor string
	cmd := &cobra.Command{
		Use:   "admit PHASE.yaml [--actor NAME] [--operator]",
		Short: "Dry run: the plan, or every refused requirement (grants nothing)",
		Long: "Admit the phase as a grant issue to the actor would, and print each requirement's verdict; nothing is granted.\n" +
			"On the submit socket it answers only a submitter of the actor (--actor, or the one actor this user submits as),\n" +
			"checks host inputs by their path against the policy's input roots and reads none of them; each uid gets a few\n" +
			"dry runs at a time (a refusal says when to retry). With --operator (control socket) it reads and digests the\n" +
			"inputs exactly as `custody grant issue` does, so it refuses exactly what the issue would.",
		Args: cobra.ExactArgs(1),
		RunE: a.jsonRunE(&asJSON, func(cmd *cobra.Command, args []string) error {
			src, err := readPhase(args[0])
			if err != nil {
				return err
			}
			resp, err := a.client(operator).Admit(cmd.Context(), api.AdmitRequest{PhaseSource: src, Actor: actor})
			if err != nil {
				return a.fail(cmd, err)
			}
			if asJSON {
				if err := writeJSON(a.stdout, resp); err != nil {
					return err
				}
			} else {
				printChecks(a.stdout, 30, resp.Checks)
			}
			if !resp.Admitted {
				return &exitError{exitRefused, errors.New("admit: refused (the requirements above)")}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&actor, "actor", "", "the actor a grant would be issued to (default: the one actor this user submits as)")
	cmd.Flags().BoolVar(&operator, "operator", false, "use the control socket: read and digest the inputs as a grant issue does")
	return cmd
}

// printChecks prints every check of a dry run, one line each, with the
// fix of each refused one; width aligns the requirement column.
func printChecks(w io.Writer, width int, checks []api.Check) {
	for _, c := range checks {
		fmt.Fprintf(w, "%-*s %-12s %s", width, quote.String(c.Requirement), quote.String(c.Verdict), quote.Message(c.Detail))
		if c.Fix != "" && (c.Verdict == "unsupported" || c.Verdict == "not-granted") {
			fmt.Fprintf(w, "; fix: %s", quote.Message(c.Fix))
		}
		fmt.Fprintln(w)
	}
}

func (a *app) grantCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "grant", Short: "Issue and revoke single-use grants (operator, control socket)"}
	var actor, ttl string
	var issueJSON bool
	issue := &cobra.Command{
		Use:   "issue PHASE.yaml --actor NAME --ttl 15m",
		Short: "Mint a signed grant for one launch of the phase; prints the DSSE envelope",
		Args:  cobra.ExactArgs(1),
		RunE: a.jsonRunE(&issueJSON, func(cmd *cobra.Command, args []string) error {
			src, err := readPhase(args[0])
			if err != nil {
				return err
			}
			env, err := a.control().IssueGrant(cmd.Context(), api.IssueRequest{Phase: src, Actor: actor, TTL: ttl})
			if err != nil {
				return a.fail(cmd, err)
			}
			_, err = a.stdout.Write(append(env, '\n'))
			return err
		}),
	}
	issue.Flags().BoolVar(&issueJSON, "json", false, "on a refusal print it as JSON on stdout (the grant is JSON either way)")
	issue.Flags().StringVar(&actor, "actor", "", "who the grant is for (must be allowed the phase's stage in policy)")
	issue.Flags().StringVar(&ttl, "ttl", "15m", "how long the grant is valid")
	_ = issue.MarkFlagRequired("actor")
	var reason string
	revoke := &cobra.Command{
		Use:   "revoke GRANT-ID",
		Short: "Revoke a grant so that it can never launch",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.revokeGrant(cmd, args[0], reason, "revoked")
		},
	}
	revoke.Flags().StringVar(&reason, "reason", "", "why (recorded)")
	cmd.AddCommand(issue, revoke)
	return cmd
}

func (a *app) runCmd() *cobra.Command {
	var grantPath, authorization, receiptPath, outputsDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run (--grant GRANT.json | --authorization NAME PHASE.yaml) [--receipt out/receipt.json]",
		Short: "Submit a grant, or a phase under a standing authorization, to custodyd and stream the run",
		Long: `Submit a grant to custodyd and stream the run. With --authorization, send
the phase request instead: custodyd decides it exactly as an operator's
grant issue would, checks it against the named authorization the operator's
policy delegates to you, mints a single-use grant for it and runs it. Its
result and receipt name the authorization.`,
		Args: cobra.MaximumNArgs(1),
		RunE: a.jsonRunE(&asJSON, func(cmd *cobra.Command, args []string) error {
			switch {
			case (grantPath == "") == (authorization == ""):
				return &exitError{exitUsage, errors.New("give --grant GRANT.json, or --authorization NAME with the phase request file")}
			case authorization != "" && len(args) != 1:
				return &exitError{exitUsage, errors.New("--authorization NAME needs the phase request file, e.g. custody run --authorization agent-loop phase.yaml")}
			case grantPath != "" && len(args) != 0:
				return &exitError{exitUsage, errors.New("--grant runs the grant's own phase: give no phase request file")}
			}
			if receiptPath != "" && outputsDir == "" {
				outputsDir = filepath.Join(filepath.Dir(receiptPath), "outputs")
			}
			if err := freshEvidence(receiptPath, outputsDir); err != nil {
				return err
			}
			var env []byte
			var phase api.PhaseSource
			var err error
			if grantPath != "" {
				env, err = readGrant(grantPath)
			} else {
				phase, err = readPhase(args[0])
			}
			if err != nil {
				return err
			}
			// With --json the result owns stdout; the workload's output
			// goes to stderr.
			wout := a.stdout
			if asJSON {
				wout = a.stderr
			}
			c := a.submit()
			started := func(id string) {
				fmt.Fprintf(a.stderr, "custody: run %s started\n", quote.String(id))
			}
			var res *api.Result
			var rcpt *api.Receipt
			if env != nil {
				res, rcpt, err = c.RunWithReceipt(cmd.Context(), env, wout, a.stderr, started)
			} else {
				res, rcpt, err = c.RunAuthorized(cmd.Context(), authorization, phase, wout, a.stderr, started)
			}
			if res != nil && receiptPath != "" && res.Status != api.StatusRefused {
				if serr := a.saveEvidence(cmd.Context(), c, res, rcpt, receiptPath, outputsDir); serr != nil {
					return &exitError{exitInternal, serr}
				}
			}
			if res != nil {
				if asJSON {
					_ = writeJSON(a.stdout, res)
				} else {
					printResult(a.stdout, res)
				}
			}
			if err != nil {
				if res != nil && len(res.Refusal) > 0 {
					// The result above listed the requirements.
					return &exitError{exitRefused, fmt.Errorf("run: refused: %d requirement(s) not granted (listed above)", len(res.Refusal))}
				}
				return a.fail(cmd, err)
			}
			if res.Status != api.StatusOK {
				return &exitError{exitFailed, fmt.Errorf("run %s: %s", quote.String(res.RunID), quote.String(string(res.Status)))}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&grantPath, "grant", "", "the `GRANT.json` envelope custody grant issue printed")
	cmd.Flags().StringVar(&authorization, "authorization", "", "run the phase request file under this standing authorization (see custody authorizations)")
	cmd.Flags().StringVar(&receiptPath, "receipt", "", "write the signed receipt here (and its Sigstore bundle beside it as *.sigstore.json); refused before the run if either exists")
	cmd.Flags().StringVar(&outputsDir, "outputs", "", "with --receipt: fetch the retained outputs into this new directory (default: outputs/ beside the receipt); refused before the run if it exists")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// readGrant reads a grant file (a bounded regular file) and refuses,
// before anything is sent, one that is empty or not JSON: the daemon could
// not even be asked about it.
func readGrant(path string) ([]byte, error) {
	data, err := readFile("grant", path, grant.MaxEnvelopeSize+envelopeSlack)
	if err != nil {
		return nil, err
	}
	env := bytes.TrimSpace(data)
	switch {
	case len(env) == 0:
		return nil, &exitError{exitRefused, fmt.Errorf("refused: grant file %s is empty; fix: pass the envelope `custody grant issue` printed", quote.String(path))}
	case !json.Valid(env):
		return nil, &exitError{exitRefused, fmt.Errorf("refused: grant file %s is not JSON, so it is no grant; fix: pass the DSSE envelope `custody grant issue` printed", quote.String(path))}
	}
	return env, nil
}

func (a *app) cancelCmd() *cobra.Command {
	var operator bool
	cmd := &cobra.Command{
		Use:   "cancel RUN-ID",
		Short: "Cancel a run: your own over the submit socket, any with --operator",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.submit()
			if operator {
				c = a.control()
			}
			if err := c.Cancel(cmd.Context(), args[0]); err != nil {
				return a.fail(cmd, err)
			}
			fmt.Fprintln(a.stdout, "cancelled", quote.String(args[0]))
			return nil
		},
	}
	cmd.Flags().BoolVar(&operator, "operator", false, "use the control socket")
	return cmd
}

func (a *app) statusCmd() *cobra.Command {
	var operator bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the runner's identity, policy, quarantine and runs; --operator adds each attempt's cleanup state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := a.submit()
			if operator {
				c = a.control()
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			out := map[string]any{"status": st}
			if operator {
				as, err := c.Attempts(cmd.Context())
				if err != nil {
					return a.fail(cmd, err)
				}
				if as == nil {
					as = []api.Attempt{} // an empty list is [], never null
				}
				out["attempts"] = as
			}
			return writeJSON(a.stdout, out)
		},
	}
	cmd.Flags().BoolVar(&operator, "operator", false, "use the control socket and list attempts")
	// The status is JSON either way; --json is accepted like every command's.
	cmd.Flags().Bool("json", true, "print JSON (always)")
	return cmd
}

func (a *app) recoverCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "recover",
		Short: "Operator: retry owned cleanup of unfinished attempts (the runner must be idle)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec, err := a.control().Recover(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			if err := writeJSON(a.stdout, rec); err != nil {
				return err
			}
			for _, at := range rec.Attempts {
				if at.State != "clean" {
					return &exitError{exitInternal, fmt.Errorf("attempt %s is %s: %s; retry: %s",
						quote.String(at.RunID), quote.String(at.State), quote.Message(at.Detail), quote.Message(at.Retry))}
				}
			}
			return nil
		},
	}
}

func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Operator policy tools"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file offline",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := readFile("policy", args[0], policy.MaxSize)
			if err != nil {
				return err
			}
			if _, err := policy.Parse(data); err != nil {
				return &exitError{exitRefused, err}
			}
			fmt.Fprintf(a.stdout, "ok %s %s\n", quote.String(args[0]), policy.Digest(data))
			return nil
		},
	}, &cobra.Command{
		Use:   "reload",
		Short: "Make custodyd re-read its policy (a broken policy then refuses everything)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.control().ReloadPolicy(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			if err := writeJSON(a.stdout, st); err != nil {
				return err
			}
			if st.Error != "" {
				return &exitError{exitRefused, fmt.Errorf("policy rejected; every request is now refused: %s", st.Error)}
			}
			return nil
		},
	})
	return cmd
}

func (a *app) schemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:       "schema request|policy|pipeline|pipeline-summary|receipt|trust|" + strings.Join(outputSchemas(), "|"),
		Short:     "Print the JSON Schema of phase requests, operator policy, pipelines, pipeline summaries, receipts, trust files, or a --json output",
		Args:      cobra.ExactArgs(1),
		ValidArgs: append([]string{"request", "policy", "pipeline", "pipeline-summary", "receipt", "trust"}, outputSchemas()...),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "request":
				_, err := a.stdout.Write(request.Schema())
				return err
			case "policy":
				_, err := a.stdout.Write(policy.Schema())
				return err
			case "pipeline":
				_, err := a.stdout.Write(pipeline.Schema())
				return err
			case "pipeline-summary":
				_, err := a.stdout.Write(evidence.PipelineSummarySchema())
				return err
			case "receipt":
				_, err := a.stdout.Write(evidence.ReceiptSchema())
				return err
			case "trust":
				_, err := a.stdout.Write(evidence.TrustSchema())
				return err
			}
			if b, ok := outputSchema(args[0]); ok {
				_, err := a.stdout.Write(b)
				return err
			}
			return usageError("schema: unknown schema %s (want request, policy, pipeline, pipeline-summary, receipt, trust or %s)", quote.String(args[0]), strings.Join(outputSchemas(), ", "))
		},
	}
}

func (a *app) quarantineCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "quarantine", Short: "Inspect or release the runner's quarantine (operator)"}
	cmd.AddCommand(&cobra.Command{
		Use:  "status",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := a.control().Quarantine(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			return writeJSON(a.stdout, q)
		},
	}, &cobra.Command{
		Use:  "release",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.control().ReleaseQuarantine(cmd.Context()); err != nil {
				return a.fail(cmd, err)
			}
			fmt.Fprintln(a.stdout, "released")
			return nil
		},
	})
	return cmd
}

// observed is a usage figure, or "unknown" for one that was not observed
// (-1).
func observed(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return strconv.FormatInt(n, 10)
}

// printResult prints a run's result for a person. Every string in it came
// from the daemon, and many from the request or the workload (the phase
// name, output file names, the error), so each goes through quote.
func printResult(w io.Writer, r *api.Result) {
	q := quote.String
	// A value the record does not hold (a run its runner died during,
	// recovered afterwards) was not observed: it prints as unknown, never
	// as an empty string.
	known := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return q(s)
	}
	fmt.Fprintf(w, "run %s (%s): %s", q(r.RunID), known(r.Name), q(string(r.Status)))
	if r.Signal != "" {
		fmt.Fprintf(w, " signal %s", q(r.Signal))
	}
	switch {
	case r.Status == api.StatusFailedToStart:
		fmt.Fprintln(w) // no workload ran, so no exit code is its; the error names the stage
	case r.ExitCode < 0 && r.Signal == "" && r.Status != api.StatusRefused:
		fmt.Fprintln(w, " exit unknown") // nobody saw how the workload ended
	default:
		fmt.Fprintf(w, " exit %d\n", r.ExitCode)
	}
	if r.GrantID != "" {
		fmt.Fprintf(w, "  grant    %s (actor %s, stage %s)\n", q(r.GrantID), known(r.Actor), known(r.Stage))
	}
	if au := r.Authorization; au != nil {
		fmt.Fprintf(w, "  minted   under authorization %s (policy %s)\n", q(au.Name), q(au.PolicyDigest))
	}
	fmt.Fprintf(w, "  tier     %s\n", known(r.Tier))
	// The runtime is the backend's pinned binary: runc, or QEMU for a
	// vm run; a run recovered after the runner died may not know it.
	if r.Runtime.Path == "" && r.Runtime.Version == "" && r.Runtime.SHA256 == "" {
		fmt.Fprintln(w, "  runtime  unknown")
	} else {
		name := "runc"
		if r.Runtime.Path != "" {
			name = q(filepath.Base(r.Runtime.Path))
		}
		fmt.Fprintf(w, "  runtime  %s %s sha256:%s\n", name, known(r.Runtime.Version), known(r.Runtime.SHA256))
	}
	fmt.Fprintf(w, "  image    %s\n", known(r.Image))
	for _, in := range r.Inputs {
		fmt.Fprintf(w, "  input    %s <- %s %s\n", q(in.Target), q(in.Source), q(in.Digest))
	}
	if r.Output != nil {
		fmt.Fprintf(w, "  output   %s (%d files, %d bytes) in %s\n", q(r.Output.Digest), len(r.Output.Files), r.Output.Bytes, q(r.Output.Path))
		for _, f := range r.Output.Files {
			fmt.Fprintf(w, "           %s sha256:%s %d\n", q(f.Path), q(f.SHA256), f.Size)
		}
		if n := r.Output.LeftOutTotal; n > 0 {
			fmt.Fprintf(w, "  left out %d output entries, not retained:\n", n)
			for _, l := range r.Output.LeftOut {
				// The name is Go-quoted already; q quotes what is not plain.
				fmt.Fprintf(w, "           %s: %s\n", quote.Message(l.Name), quote.Message(l.Reason))
			}
		}
	}
	if r.Streams == nil && r.Usage == (api.Usage{}) {
		fmt.Fprintln(w, "  usage    unknown (not observed)")
	} else {
		fmt.Fprintf(w, "  usage    peak memory %s bytes, cpu %s ms, wall %s ms\n", observed(r.Usage.PeakMemoryBytes), observed(r.Usage.CPUTimeMillis), observed(r.Usage.WallMillis))
	}
	printLimits(w, r.Usage)
	if r.Streams != nil {
		for _, st := range []struct {
			name string
			d    api.StreamDigest
		}{{"stdout", r.Streams.Stdout}, {"stderr", r.Streams.Stderr}} {
			fmt.Fprintf(w, "  %s   sha256:%s %d bytes", st.name, st.d.SHA256, st.d.Bytes)
			if st.d.Truncated {
				fmt.Fprint(w, " (truncated: the workload wrote more)")
			}
			fmt.Fprintln(w)
		}
	}
	if r.Cleanup != nil {
		fmt.Fprintf(w, "  cleanup  verified=%t\n", r.Cleanup.Verified)
	}
	for _, c := range r.Refusal {
		fmt.Fprintf(w, "  refused  %s: %s (%s): %s; fix: %s\n", q(c.Requirement), q(c.Verdict), q(c.Code), quote.Message(c.Detail), quote.Message(c.Fix))
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error    %s\n", quote.Message(r.Error))
	}
}

// printLimits prints the limits the kernel enforced (read from the live
// sandbox) and what hitting them did, so a run stopped by its pids budget
// says so instead of showing only the workload's exit code.
func printLimits(w io.Writer, u api.Usage) {
	if u.MemoryLimitBytes <= 0 && u.PidsLimit <= 0 {
		return
	}
	fmt.Fprintf(w, "  limits   memory %d bytes (%d OOM kills), pids %d", u.MemoryLimitBytes, u.OOMKills, u.PidsLimit)
	switch {
	case u.PidsLimitHits > 0:
		fmt.Fprintf(w, " (reached: %d forks refused)", u.PidsLimitHits)
	case u.PidsLimitHits < 0:
		fmt.Fprint(w, " (not watched)")
	}
	fmt.Fprintln(w)
}

// imageRmCmd removes a stored image; the runner refuses one a live grant
// binds, naming the grant.
func (a *app) imageRmCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rm DIGEST",
		Short: "Remove a stored image no live grant binds (operator)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.control().RemoveImage(cmd.Context(), args[0]); err != nil {
				return a.fail(cmd, err)
			}
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(map[string]string{"removed": args[0]})
			}
			fmt.Fprintln(a.stdout, "removed "+quote.String(args[0]))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// imagePruneCmd removes the images no live grant binds and the layers and
// config blobs nothing references.
func (a *app) imagePruneCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove every image no live grant binds, and unreferenced layers (operator)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := a.control().PruneImages(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			if asJSON {
				_, err := a.stdout.Write(append(raw, '\n'))
				return err
			}
			var p struct {
				Images          []string
				Layers, Configs int
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			for _, d := range p.Images {
				fmt.Fprintln(a.stdout, "removed "+quote.String(d))
			}
			fmt.Fprintf(a.stdout, "removed %d images, %d layers, %d config blobs\n", len(p.Images), p.Layers, p.Configs)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
