package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/mcpserver"
)

func (a *app) mcpCmd() *cobra.Command {
	var streamBytes, readBytes int
	var baseDir string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve custody's tools to a coding agent over MCP (stdio; submit socket only)",
		Long: "Serve the Model Context Protocol on stdin and stdout, for an agent that starts this command as its MCP server.\n" +
			"Its tools run phases and pipelines under an operator's standing authorization (or a hand-issued grant),\n" +
			"and read back results, receipts and outputs. It talks only to custodyd's submit socket (--submit): it never\n" +
			"opens the control socket and holds no key, so the agent gains no authority the submit socket does not give.\n" +
			"Diagnostics go to stderr; stdout carries only the protocol.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			err := mcpserver.Serve(cmd.Context(), api.NewClient(a.submitSocket), mcpserver.Options{
				StreamBytes: streamBytes, ReadBytes: readBytes, BaseDir: baseDir, Version: matrix.Version, Logger: log,
			})
			if err != nil && cmd.Context().Err() == nil {
				return &exitError{exitInternal, fmt.Errorf("mcp: %w", err)}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&streamBytes, "stream-bytes", mcpserver.DefaultStreamBytes, "how much of each of a run's stdout and stderr a tool answer carries at most (the runner keeps all of it)")
	cmd.Flags().IntVar(&readBytes, "read-bytes", mcpserver.DefaultReadBytes, "how much of an output file one read returns at most")
	cmd.Flags().StringVar(&baseDir, "base-dir", "", "absolute directory that relative input sources and pipeline files resolve against (default: the working directory)")
	return cmd
}
