// Package mcpserver is custody's MCP server: the tools a coding agent uses
// to run phases and pipelines under an operator's standing authorization,
// and to read back their results, receipts and outputs. It reaches
// custodyd only through the submit socket's client (package api): it never
// opens the control socket, reads a key or signs anything, so an agent
// that holds it holds no more authority than the submit socket gives.
package mcpserver

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
)

// Bounds on what a tool answer carries back to the agent. The runner keeps
// every byte (up to its own caps) and digests it; an answer shows a bounded
// head of it, says how much there was, and names where the rest is.
const (
	// DefaultStreamBytes is how much of each of stdout and stderr a run's
	// answer carries unless the call asks for less (or the server's
	// operator set another cap).
	DefaultStreamBytes = 64 << 10
	// DefaultReadBytes is how much of one output file a read returns
	// unless the call asks for less.
	DefaultReadBytes = 256 << 10
)

// Options configure a Server.
type Options struct {
	// StreamBytes caps each of stdout and stderr in an answer
	// (DefaultStreamBytes when zero).
	StreamBytes int
	// ReadBytes caps one read of an output file (DefaultReadBytes when
	// zero).
	ReadBytes int
	// BaseDir is where relative input sources and pipeline files resolve
	// when a call names no base_dir: the directory the agent started the
	// server in (the process's working directory when empty).
	BaseDir string
	// Version is custody's version, reported to the client in the MCP
	// handshake.
	Version string
	// Logger receives the server's diagnostics (never the agent's data);
	// nil discards them.
	Logger *slog.Logger
}

// Server holds the submit socket's client and the answer bounds.
type Server struct {
	c    *api.Client
	opts Options
	log  *slog.Logger
}

// New returns the MCP server of the tools over c, a client of custodyd's
// submit socket.
func New(c *api.Client, opts Options) (*mcp.Server, error) {
	if opts.StreamBytes <= 0 {
		opts.StreamBytes = DefaultStreamBytes
	}
	if opts.ReadBytes <= 0 {
		opts.ReadBytes = DefaultReadBytes
	}
	if opts.BaseDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("mcp server: working directory: %w", err)
		}
		opts.BaseDir = wd
	}
	if !filepath.IsAbs(opts.BaseDir) {
		return nil, fmt.Errorf("mcp server: base directory %q is not absolute", opts.BaseDir)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{c: c, opts: opts, log: log}
	srv := mcp.NewServer(&mcp.Implementation{Name: "custody", Title: "custody runner", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       log,
	})
	s.addTools(srv)
	return srv, nil
}

// Serve runs the server over stdin and stdout until the client goes away
// or ctx ends.
func Serve(ctx context.Context, c *api.Client, opts Options) error {
	srv, err := New(c, opts)
	if err != nil {
		return err
	}
	return srv.Run(ctx, &mcp.StdioTransport{})
}

// instructions is what the client shows the model about the server as a
// whole.
const instructions = `custody runs untrusted work (builds, tests, generated programs) in a contained sandbox on this machine, ` +
	`under an authorization the operator delegated. You hold no authority yourself: every run is admitted by the ` +
	`operator's policy, gets a fresh single-use grant, and ends with a signed receipt. Start with ` +
	`custody_authorizations to see what you may run (images by digest, stages, limits). Run with custody_run; ` +
	`a refusal lists each requirement that was not granted and how to fix the request.`
