package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/quote"
)

// authorizationsCmd lists the standing authorizations the caller may use.
func (a *app) authorizationsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "authorizations",
		Short: "List the standing authorizations you may run phases under, and what is left of their limits",
		Long: `List the standing authorizations the operator's policy delegates to you
(your uid or group is a submitter of the authorization's actor): what each
lets you run (stages, images, ceilings, egress, credentials, input roots,
pipelines, verifier stages), its validity window, its rate and volume
limits and what is left of them now. Run a phase under one with
custody run --authorization NAME PHASE.yaml.`,
		Args: cobra.NoArgs,
		RunE: a.jsonRunE(&asJSON, func(cmd *cobra.Command, _ []string) error {
			out, err := a.submit().Authorizations(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			if asJSON {
				return writeJSON(a.stdout, out)
			}
			printAuthorizations(a.stdout, out.Authorizations)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func printAuthorizations(w io.Writer, as []api.Authorization) {
	if len(as) == 0 {
		fmt.Fprintln(w, "no standing authorization is delegated to you; ask the operator for one, or for a grant")
		return
	}
	q := quote.String
	for _, au := range as {
		fmt.Fprintf(w, "%s (actor %s), valid %s to %s\n", q(au.Name), q(au.Actor), au.NotBefore.Format(time.RFC3339), au.NotAfter.Format(time.RFC3339))
		fmt.Fprintf(w, "  stages       %s\n", q(strings.Join(au.Stages, " ")))
		for _, im := range au.Images {
			fmt.Fprintf(w, "  image        %s %s\n", q(im.Digest), q(im.Name))
		}
		c := au.Ceilings
		fmt.Fprintf(w, "  ceilings     memory %d, pids %d, cpu %v, wall time %s, output %d bytes in %d files, tmp %d bytes, nofile %d\n",
			c.MemoryBytes, c.Pids, c.CPU, time.Duration(c.WallTimeMillis)*time.Millisecond, c.OutputBytes, c.OutputFiles, c.TmpBytes, c.Nofile)
		fmt.Fprintf(w, "  egress       %s\n", q(listOrNone(au.Egress)))
		fmt.Fprintf(w, "  credentials  %s\n", q(listOrNone(au.Credentials)))
		fmt.Fprintf(w, "  input roots  %s\n", q(listOrNone(au.InputRoots)))
		fmt.Fprintf(w, "  pipelines    %t, verifier stages %t\n", au.Pipelines, au.Verifier)
		l, r := au.Limits, au.Remaining
		fmt.Fprintf(w, "  limits       %d of %d grants this minute, %d of %d runs in flight", r.GrantsPerMinute, l.GrantsPerMinute, r.ConcurrentRuns, l.ConcurrentRuns)
		if l.RunsPerDay > 0 {
			fmt.Fprintf(w, ", %d of %d runs today", r.RunsPerDay, l.RunsPerDay)
		}
		if l.CPUSecondsPerDay > 0 {
			fmt.Fprintf(w, ", %d of %d CPU-seconds today", r.CPUSecondsPerDay, l.CPUSecondsPerDay)
		}
		fmt.Fprintln(w, " left")
	}
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, " ")
}

// authorizationCmd is the operator's side: revoke a standing
// authorization.
func (a *app) authorizationCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "authorization",
		Short: "Manage standing authorizations (operators, on the control socket)",
	}
	var reason string
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a standing authorization: custodyd mints nothing more under it",
		Long: `Revoke a standing authorization. custodyd records the revocation in its
operations log, then mints nothing more under the authorization; runs
already started under it finish under their own grants. The revocation
survives restarts and holds until the authorization's definition in the
policy changes (a policy reloaded without it mints nothing under it
either).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := a.control().RevokeAuthorization(cmd.Context(), api.AuthorizationRevokeRequest{Name: args[0], Reason: reason})
			if err != nil {
				return a.fail(cmd, err)
			}
			if out.Already {
				fmt.Fprintf(a.stdout, "authorization %s was already revoked\n", quote.String(out.Name))
				return nil
			}
			fmt.Fprintf(a.stdout, "revoked authorization %s: nothing more is minted under it\n", quote.String(out.Name))
			return nil
		},
	}
	revoke.Flags().StringVar(&reason, "reason", "", "why (recorded in the operations log)")
	cmd.AddCommand(revoke)
	return cmd
}
