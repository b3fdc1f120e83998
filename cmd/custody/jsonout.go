package main

import (
	"embed"
	"errors"
	"io"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
)

// The JSON Schemas of the CLI's --json outputs (custody schema NAME). They
// are the published shape: a test validates real outputs against them.
//
//go:embed schemas/*.schema.json
var schemaFS embed.FS

// schemaURL is where the schemas' $ids live; refs between them resolve
// there.
const schemaURL = "https://custody.dev/schema/cli/"

// outputSchemas lists the output schemas by name (check is a part of the
// others).
func outputSchemas() []string {
	ents, _ := fs.ReadDir(schemaFS, "schemas")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".schema.json"))
	}
	sort.Strings(names)
	return names
}

// outputSchema returns one output schema's bytes.
func outputSchema(name string) ([]byte, bool) {
	if !slices.Contains(outputSchemas(), name) {
		return nil, false
	}
	b, err := schemaFS.ReadFile("schemas/" + name + ".schema.json")
	return b, err == nil
}

// jsonFailure prints err on stdout as {"error": {...}} (error.schema.json)
// when the command runs under --json, so a caller parsing stdout always
// gets JSON: a refusal the CLI made itself (an unreadable file, an existing
// --receipt), or one the daemon answered, checks included. err is returned
// as is (its exit code and its stderr line stay).
func (a *app) jsonFailure(asJSON bool, err error) error {
	if err == nil || !asJSON {
		return err
	}
	e := api.Error{Code: api.CodeInternal, Message: err.Error()}
	var ae *api.Error
	var ee *exitError
	switch {
	case errors.As(err, &ae):
		e = api.Error{Code: ae.Code, Message: err.Error(), Checks: ae.Checks, RetryAfterSeconds: ae.RetryAfterSeconds}
	case errors.As(err, &ee) && ee.code == exitRefused:
		e.Code = api.CodeRefused
	case errors.As(err, &ee) && ee.code == exitUsage:
		e.Code = "usage"
	}
	_ = writeJSON(a.stdout, map[string]any{"error": e})
	return err
}

// jsonRunE runs a command's RunE and, under --json, prints its error as
// JSON when the command printed nothing on stdout itself (a dry run's
// refusal or a run's result is already the JSON answer).
func (a *app) jsonRunE(asJSON *bool, run func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if !*asJSON {
			return run(cmd, args)
		}
		orig := a.stdout
		cw := &countingWriter{w: orig}
		a.stdout = cw
		err := run(cmd, args)
		a.stdout = orig
		if err != nil && cw.n == 0 {
			return a.jsonFailure(true, err)
		}
		return err
	}
}

// countingWriter counts what went through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
