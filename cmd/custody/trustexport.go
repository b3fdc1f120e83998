package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/api"
)

// trustKeyYAML and trustYAML are the trust file (evidence/trust.schema.json)
// as trust export writes it.
type trustKeyYAML struct {
	Name         string `yaml:"name"`
	PublicKeyPEM string `yaml:"publicKeyPEM"`
	NotBefore    string `yaml:"notBefore,omitempty"`
	NotAfter     string `yaml:"notAfter,omitempty"`
}

type trustYAML struct {
	APIVersion string         `yaml:"apiVersion"`
	Kind       string         `yaml:"kind"`
	Runners    []trustKeyYAML `yaml:"runners"`
	Issuers    []trustKeyYAML `yaml:"issuers"`
	MaxAge     string         `yaml:"maxAge"`
	Tiers      []string       `yaml:"tiers"`
}

func (a *app) trustCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trust", Short: "Trust files for custody verify"}
	var tiers []string
	var maxAge time.Duration
	var operator bool
	export := &cobra.Command{
		Use:   "export [--tiers development,production] [--max-age 720h] > trust.yaml",
		Short: "Print a trust file for this runner: its current and retired keys, each with the window it signed in",
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
			doc := trustYAML{APIVersion: "custody.dev/v1alpha1", Kind: "Trust",
				Runners: trustKeys("runner", ks.Runners), Issuers: trustKeys("issuer", ks.Issuers),
				MaxAge: maxAge.String(), Tiers: tiers}
			out, err := yaml.Marshal(doc)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "# custody trust export: the keys of this runner; a key verifies only what it\n# signed within its window (notBefore/notAfter, from its rotations).\n%s", out)
			return err
		},
	}
	export.Flags().StringSliceVar(&tiers, "tiers", []string{"production"}, "the tiers a receipt may have to be promoted")
	export.Flags().DurationVar(&maxAge, "max-age", 720*time.Hour, "how long after its run a receipt stays promotable")
	export.Flags().BoolVar(&operator, "operator", false, "ask the control socket")
	cmd.AddCommand(export)
	return cmd
}

// trustKeys names each key by role and id prefix and carries its window.
func trustKeys(role string, ks []api.PublicKey) []trustKeyYAML {
	out := make([]trustKeyYAML, 0, len(ks))
	for _, k := range ks {
		id := strings.TrimPrefix(k.ID, "sha256:")
		name := role + "-" + strings.ToLower(id[:min(len(id), 12)])
		if k.Current {
			name += "-current"
		}
		t := trustKeyYAML{Name: name, PublicKeyPEM: strings.TrimSpace(k.PEM) + "\n"}
		if k.NotBefore != nil {
			t.NotBefore = k.NotBefore.UTC().Format(time.RFC3339Nano)
		}
		if k.NotAfter != nil {
			t.NotAfter = k.NotAfter.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, t)
	}
	return out
}
