package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/runner"
)

// Exit codes of `custody run`.
const (
	exitOK       = 0
	exitFailed   = 1 // the workload failed, timed out, was OOM-killed or cancelled
	exitRefused  = 2 // refused before anything ran
	exitInternal = 3 // the runner could not run or clean up (see quarantine)
)

func (a *app) openRunner(cmd *cobra.Command) (*runner.Runner, error) {
	cfg, err := runner.LoadConfig(a.configPath)
	if err != nil {
		return nil, err
	}
	return runner.New(cmd.Context(), *cfg, a.logger())
}

func (a *app) doctorCmd() *cobra.Command {
	var asJSON bool
	var runtimePath string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Probe this host and print its evidenced capability profile",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runtimePath == "" {
				if cfg, err := runner.LoadConfig(a.configPath); err == nil {
					runtimePath = cfg.Runtime.Path
				}
			}
			prof, err := platform.Probe(cmd.Context(), platform.Options{RuntimePath: runtimePath})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, prof)
			}
			printProfile(a.stdout, prof)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&runtimePath, "runtime", "", "runtime binary to probe (default: from --config)")
	return cmd
}

func (a *app) imageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Manage the runner's content-addressed images"}
	var asJSON bool
	imp := &cobra.Command{
		Use:   "import DIR|TAR",
		Short: "Import a rootfs directory or tar (optionally gzip) as a content-addressed image",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.openRunner(cmd)
			if err != nil {
				return err
			}
			defer r.Close()
			img, err := r.Images().Import(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, img)
			}
			fmt.Fprintln(a.stdout, img.Digest)
			return nil
		},
	}
	imp.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	list := &cobra.Command{
		Use:   "list",
		Short: "List imported images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := a.openRunner(cmd)
			if err != nil {
				return err
			}
			defer r.Close()
			imgs, err := r.Images().List()
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, imgs)
		},
	}
	cmd.AddCommand(imp, list)
	return cmd
}

// loadPolicy loads the operator policy. Any failure refuses: a broken
// policy grants nothing.
func loadPolicy(path string) (*policy.Policy, error) {
	if path == "" {
		return nil, &exitError{exitRefused, errors.New("refused: no operator policy given (--policy); without a policy nothing is granted")}
	}
	pol, err := policy.Load(path)
	if err != nil {
		return nil, &exitError{exitRefused, fmt.Errorf("refused: operator policy %s is invalid, so nothing is granted: %w", path, err)}
	}
	return pol, nil
}

func loadRequest(path string) (*request.Phase, error) {
	req, err := request.Load(path)
	if err != nil {
		return nil, &exitError{exitRefused, fmt.Errorf("refused: %w", err)}
	}
	return req, nil
}

// loadPhase loads the policy and the request (either failing refuses) and
// opens the runner.
func (a *app) loadPhase(cmd *cobra.Command, policyPath, phasePath string) (*runner.Runner, *policy.Policy, *request.Phase, error) {
	pol, err := loadPolicy(policyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	req, err := loadRequest(phasePath)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := a.openRunner(cmd)
	if err != nil {
		return nil, nil, nil, &exitError{exitInternal, err}
	}
	return r, pol, req, nil
}

func (a *app) admitCmd() *cobra.Command {
	var policyPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "admit PHASE.yaml",
		Short: "Dry run: print the admitted plan or every refused requirement",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, pol, req, err := a.loadPhase(cmd, policyPath, args[0])
			if err != nil {
				return a.refusedResult(asJSON, err)
			}
			defer r.Close()
			plan, err := r.Admit(req, pol)
			if err != nil {
				return a.refusedResult(asJSON, err)
			}
			if asJSON {
				return writeJSON(a.stdout, map[string]any{"admitted": true, "plan": plan})
			}
			for _, c := range plan.Checks {
				fmt.Fprintf(a.stdout, "%-28s %-10s %s\n", c.Requirement, c.Verdict, c.Detail)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policyPath, "policy", "", "operator policy file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) runCmd() *cobra.Command {
	var policyPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run PHASE.yaml --policy POLICY.yaml",
		Short: "Admit and run one phase under the pinned runtime",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, pol, req, err := a.loadPhase(cmd, policyPath, args[0])
			if err != nil {
				return a.refusedResult(asJSON, err)
			}
			defer r.Close()
			prep, err := r.Prepare(cmd.Context(), req, pol)
			if err != nil {
				return a.refusedResult(asJSON, err)
			}
			// The workload's stdout and stderr go to ours; with --json the
			// result owns stdout, so the workload's output goes to stderr.
			wout := a.stdout
			if asJSON {
				wout = a.stderr
			}
			res, runErr := r.Launch(cmd.Context(), prep, wout, a.stderr)
			if asJSON {
				if err := writeJSON(a.stdout, res); err != nil {
					return err
				}
			} else {
				printResult(a.stdout, res)
			}
			switch {
			case errors.Is(runErr, runner.ErrQuarantined):
				return &exitError{exitInternal, runErr}
			case res.Status == runner.StatusRefused:
				return &exitError{exitRefused, runErr}
			case runErr != nil:
				return &exitError{exitInternal, runErr}
			case res.Status != runner.StatusOK:
				return &exitError{exitFailed, fmt.Errorf("run %s: %s", res.RunID, res.Status)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&policyPath, "policy", "", "operator policy file (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// refusedResult reports a refusal before anything ran.
func (a *app) refusedResult(asJSON bool, err error) error {
	if asJSON {
		out := map[string]any{"status": runner.StatusRefused, "error": err.Error()}
		var re *admission.RefusedError
		if errors.As(err, &re) {
			out["refusal"] = re.Checks
		}
		_ = writeJSON(a.stdout, out)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	if errors.Is(err, runner.ErrQuarantined) {
		return &exitError{exitInternal, err}
	}
	return &exitError{exitRefused, err}
}

func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Operator policy tools"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file offline",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if _, err := policy.Load(args[0]); err != nil {
				return &exitError{exitRefused, err}
			}
			fmt.Fprintf(a.stdout, "ok %s %s\n", args[0], policy.Digest(data))
			return nil
		},
	})
	return cmd
}

func (a *app) schemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:       "schema request|policy",
		Short:     "Print the JSON Schema of phase requests or operator policy",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"request", "policy"},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "request":
				_, err := a.stdout.Write(request.Schema())
				return err
			case "policy":
				_, err := a.stdout.Write(policy.Schema())
				return err
			}
			return fmt.Errorf("unknown schema %q (want request or policy)", args[0])
		},
	}
}

func (a *app) quarantineCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "quarantine", Short: "Inspect or release the runner's quarantine (operator)"}
	cmd.AddCommand(&cobra.Command{
		Use:  "status",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := a.openRunner(cmd)
			if err != nil {
				return err
			}
			defer r.Close()
			q, err := r.Quarantine()
			if err != nil {
				return err
			}
			if q == nil {
				fmt.Fprintln(a.stdout, "not quarantined")
				return nil
			}
			return writeJSON(a.stdout, q)
		},
	}, &cobra.Command{
		Use:  "release",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := a.openRunner(cmd)
			if err != nil {
				return err
			}
			defer r.Close()
			return r.ReleaseQuarantine()
		},
	})
	return cmd
}

func printProfile(w interface{ Write([]byte) (int, error) }, p *platform.Profile) {
	fmt.Fprintf(w, "kernel        %s (%s/%s) %s\n", p.Kernel, p.OS, p.Arch, p.Distro)
	fmt.Fprintf(w, "cgroup mode   %s\n", p.Cgroup.Mode)
	fmt.Fprintf(w, "cgroup v2     delegated: %s\n", strings.Join(p.Cgroup.V2Delegated, " "))
	for c, why := range p.Cgroup.V2Missing {
		fmt.Fprintf(w, "              missing %s: %s\n", c, why)
	}
	fmt.Fprintf(w, "cgroup v1     usable: %s\n", strings.Join(p.Cgroup.V1Usable, " "))
	for _, f := range []struct {
		name string
		f    platform.Fact
	}{{"seccomp", p.Seccomp}, {"userns", p.UserNS}, {"tmpfs", p.Tmpfs}, {"overlay", p.Overlay}} {
		state := "ok"
		if !f.f.OK {
			state = "NO (" + f.f.Detail + ")"
		}
		fmt.Fprintf(w, "%-13s %s — %s\n", f.name, state, f.f.How)
	}
	if p.Runtime != nil {
		fmt.Fprintf(w, "runtime       %s %s sha256:%s\n", p.Runtime.Path, p.Runtime.Version, p.Runtime.SHA256)
	}
}

func printResult(w interface{ Write([]byte) (int, error) }, r *runner.Result) {
	fmt.Fprintf(w, "run %s (%s): %s", r.RunID, r.Name, r.Status)
	if r.Signal != "" {
		fmt.Fprintf(w, " signal %s", r.Signal)
	}
	fmt.Fprintf(w, " exit %d\n", r.ExitCode)
	fmt.Fprintf(w, "  tier     %s\n", r.Tier)
	fmt.Fprintf(w, "  runtime  runc %s sha256:%s\n", r.Runtime.Version, r.Runtime.SHA256)
	fmt.Fprintf(w, "  image    %s\n", r.Image)
	for _, in := range r.Inputs {
		fmt.Fprintf(w, "  input    %s <- %s %s\n", in.Target, in.Source, in.Digest)
	}
	if r.Output != nil {
		fmt.Fprintf(w, "  output   %s (%d files, %d bytes) in %s\n", r.Output.Digest, len(r.Output.Files), r.Output.Bytes, r.Output.Path)
		for _, f := range r.Output.Files {
			fmt.Fprintf(w, "           %s sha256:%s %d\n", f.Path, f.SHA256, f.Size)
		}
	}
	fmt.Fprintf(w, "  usage    peak memory %d bytes, cpu %d ms, wall %d ms\n", r.Usage.PeakMemoryBytes, r.Usage.CPUTimeMillis, r.Usage.WallMillis)
	if r.Cleanup != nil {
		fmt.Fprintf(w, "  cleanup  verified=%t\n", r.Cleanup.Verified)
	}
	for _, c := range r.Refusal {
		fmt.Fprintf(w, "  refused  %s: %s (%s): %s; fix: %s\n", c.Requirement, c.Verdict, c.Code, c.Detail, c.Fix)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error    %s\n", r.Error)
	}
}
