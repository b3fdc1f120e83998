package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

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
