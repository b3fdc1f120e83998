package main

import (
	"fmt"
	"io"
	"log/slog"
)

// newLogger makes custodyd's logger: "text" (logfmt) or "json" (one object
// per line) on w, at lvl.
func newLogger(w io.Writer, format string, lvl slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: use text or json", format)
}
