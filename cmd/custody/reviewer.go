package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// digestCmd computes an input's digests the way custody does, so that a
// reviewer can reproduce a receipt's input lines from the files alone.
func (a *app) digestCmd() *cobra.Command {
	var target string
	cmd := &cobra.Command{
		Use:   "digest PATH [--target /in/src]",
		Short: "Print the tree digest custody gives PATH as an input (and, with --target, the grant's closure digest of that one input)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := filepath.Abs(args[0])
			if err != nil {
				return &exitError{exitRefused, fmt.Errorf("digest: %w", err)}
			}
			tree, err := snapshot.Digest(cmd.Context(), src, treehash.Options{})
			if err != nil {
				return &exitError{exitRefused, fmt.Errorf("digest: %w", err)}
			}
			fmt.Fprintf(a.stdout, "%s  %s (%d entries, %d bytes)\n", tree.Digest, src, len(tree.Entries), tree.Bytes)
			if target != "" {
				if !filepath.IsAbs(target) {
					return usageError("digest: --target must be an absolute path inside the sandbox, e.g. /in/src")
				}
				closure := grant.ClosureDigest([]grant.Input{{Source: src, Target: target, Digest: tree.Digest}})
				fmt.Fprintf(a.stdout, "%s  closure of the one input %s -> %s\n", closure, src, target)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&target, "target", "", "the input's mount point in the sandbox, for its closure digest")
	return cmd
}

// trustCmd writes trust files for reviewers.
func (a *app) trustCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trust", Short: "Trust files for reviewers"}
	var runnerName, issuerName string
	var maxAge time.Duration
	var tiers []string
	var runnerPEM bool
	export := &cobra.Command{
		Use:   "export [--max-age 1h] [--tier development]",
		Short: "Print a trust file holding this runner's receipt key and grant-issuer key (inline PEM), read from custodyd",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.submit().Status(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			if runnerPEM {
				// For standard tools (cosign verify-blob-attestation --key).
				_, err := io.WriteString(a.stdout, st.RunnerPublicKey)
				return err
			}
			out, err := evidence.ExportTrust(evidence.Export{
				Runners: []evidence.ExportKey{{Name: runnerName, PEM: st.RunnerPublicKey}},
				Issuers: []evidence.ExportKey{{Name: issuerName, PEM: st.IssuerPublicKey}},
				MaxAge:  maxAge,
				Tiers:   tiers,
			})
			if err != nil {
				return &exitError{exitInternal, err}
			}
			_, err = a.stdout.Write(out)
			return err
		},
	}
	export.Flags().BoolVar(&runnerPEM, "runner-pem", false, "print only the runner's receipt key, as a PEM public key (for cosign and other standard tools)")
	export.Flags().StringVar(&runnerName, "runner-name", "runner", "name of the runner key in the trust file")
	export.Flags().StringVar(&issuerName, "issuer-name", "issuer", "name of the issuer key in the trust file")
	export.Flags().DurationVar(&maxAge, "max-age", 0, "how old a receipt may be (default: the trust file default)")
	export.Flags().StringSliceVar(&tiers, "tier", nil, "tiers accepted: production, development (default: production only)")
	cmd.AddCommand(export)
	return cmd
}
