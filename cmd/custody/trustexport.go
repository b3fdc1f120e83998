package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
)

func (a *app) trustCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trust", Short: "Trust files for custody verify"}
	var tiers []string
	var maxAge time.Duration
	var operator, runnerPEM bool
	export := &cobra.Command{
		Use:   "export [--tiers development,production] [--max-age 720h] > trust.yaml",
		Short: "Print a trust file for this runner: its current and retired keys (inline PEM), each with the window it signed in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, t := range tiers {
				if t != "development" && t != "production" {
					return usageError("--tiers %s: the tiers are development and production", t)
				}
			}
			if maxAge <= 0 {
				return usageError("--max-age %s: want a positive duration", maxAge)
			}
			ks, err := a.client(operator).Keys(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			if runnerPEM {
				// For standard tools (cosign verify-blob-attestation --key).
				for _, k := range ks.Runners {
					if k.Current {
						_, err := io.WriteString(a.stdout, strings.TrimSpace(k.PEM)+"\n")
						return err
					}
				}
				return &exitError{exitInternal, fmt.Errorf("trust export: custodyd names no current runner key")}
			}
			out, err := evidence.ExportTrust(evidence.Export{
				Runners: trustKeys("runner", ks.Runners), Issuers: trustKeys("issuer", ks.Issuers),
				MaxAge: maxAge, Tiers: tiers,
			})
			if err != nil {
				return &exitError{exitInternal, err}
			}
			_, err = fmt.Fprintf(a.stdout, "# custody trust export: the keys of this runner; a key verifies only what it\n# signed within its window (notBefore/notAfter, from its rotations).\n%s", out)
			return err
		},
	}
	export.Flags().StringSliceVar(&tiers, "tiers", []string{"production"}, "the tiers a receipt may have to be promoted")
	export.Flags().DurationVar(&maxAge, "max-age", 720*time.Hour, "how long after its run a receipt stays promotable")
	export.Flags().BoolVar(&operator, "operator", false, "ask the control socket")
	export.Flags().BoolVar(&runnerPEM, "runner-pem", false, "print only the current runner key, as a PEM public key (for cosign and other standard tools)")
	cmd.AddCommand(export)
	return cmd
}

// trustKeys names each key by role and id prefix and carries its window.
func trustKeys(role string, ks []api.PublicKey) []evidence.ExportKey {
	out := make([]evidence.ExportKey, 0, len(ks))
	for _, k := range ks {
		id := strings.TrimPrefix(k.ID, "sha256:")
		name := role + "-" + strings.ToLower(id[:min(len(id), 12)])
		if k.Current {
			name += "-current"
		}
		e := evidence.ExportKey{Name: name, PEM: strings.TrimSpace(k.PEM) + "\n"}
		if k.NotBefore != nil {
			e.NotBefore = *k.NotBefore
		}
		if k.NotAfter != nil {
			e.NotAfter = *k.NotAfter
		}
		if k.RevokedAt != nil {
			e.RevokedAt = *k.RevokedAt
		}
		out = append(out, e)
	}
	return out
}
