package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/daemonflags"
	"github.com/custody-dev/custody/internal/schemadoc"
	"github.com/custody-dev/custody/pipeline"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
)

// docsCmd writes the generated reference pages: one Markdown page and one
// man page per command, made from this command tree, the same two for
// custodyd, made from the daemon's own flag set, and one page per input
// format, made from its JSON Schema. It is hidden: make docs and make
// install run it; operators read what it writes.
func (a *app) docsCmd() *cobra.Command {
	var markdown, man, man8, schemas string
	cmd := &cobra.Command{
		Use:    "docs",
		Short:  "Write the generated reference pages (make docs, make install)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if markdown == "" && man == "" && man8 == "" && schemas == "" {
				return usageError("docs: name --markdown DIR, --man DIR, --man8 DIR or --schemas DIR")
			}
			if err := writeDocs(markdown, man, schemas); err != nil {
				return &exitError{exitInternal, fmt.Errorf("docs: %w", err)}
			}
			if err := writeDaemonMan(man8); err != nil {
				return &exitError{exitInternal, fmt.Errorf("docs: %w", err)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&markdown, "markdown", "", "write a Markdown page per command into `DIR` (its old pages are replaced)")
	cmd.Flags().StringVar(&man, "man", "", "write a man page (section 1) per command into `DIR`")
	cmd.Flags().StringVar(&man8, "man8", "", "write custodyd's man page (section 8) into `DIR`")
	cmd.Flags().StringVar(&schemas, "schemas", "", "write a Markdown page per input format's JSON Schema into `DIR` (its old pages are replaced)")
	return cmd
}

// docsTree is the command tree as a reader sees it: the socket flags show
// their built-in defaults, not whatever CUSTODY_CONTROL_SOCKET and
// CUSTODY_SUBMIT_SOCKET say in the environment that generates the pages.
func docsTree() *cobra.Command {
	root := (&app{}).rootCmd()
	root.DisableAutoGenTag = true
	for name, def := range map[string]string{"control": api.DefaultControlSocket, "submit": api.DefaultSubmitSocket} {
		root.PersistentFlags().Lookup(name).DefValue = def
	}
	return root
}

// daemonCmd is custodyd's command line as a command of its own, for its
// reference pages: the flags are the very set the daemon parses.
func daemonCmd() *cobra.Command {
	fs := flag.NewFlagSet("custodyd", flag.ContinueOnError)
	daemonflags.Define(fs)
	cmd := &cobra.Command{
		Use:               "custodyd",
		Short:             daemonflags.Short,
		Long:              daemonflags.Long,
		Run:               func(*cobra.Command, []string) {}, // runnable: the pages show its usage line
		DisableAutoGenTag: true,
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}

// writeDaemonMan writes custodyd.8 into dir, if dir is set.
func writeDaemonMan(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	header := &doc.GenManHeader{Title: "CUSTODYD", Section: "8", Source: "custody", Manual: "custody manual"}
	return writePage(filepath.Join(dir, "custodyd.8"), func(f *os.File) error { return doc.GenMan(daemonCmd(), header, f) })
}

// writePage creates path and fills it with gen.
func writePage(path string, gen func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gen(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// schemaPages are the generated field references: file name, title, the
// command that prints the schema, and the schema.
func schemaPages() []struct {
	file, title, command string
	schema               []byte
} {
	return []struct {
		file, title, command string
		schema               []byte
	}{
		{"policy.md", "Policy fields", "custody schema policy", policy.Schema()},
		{"phase.md", "Phase request fields", "custody schema request", request.Schema()},
		{"pipeline.md", "Pipeline fields", "custody schema pipeline", pipeline.Schema()},
		{"trust.md", "Trust file fields", "custody schema trust", evidence.TrustSchema()},
	}
}

func writeDocs(markdown, man, schemas string) error {
	if markdown != "" {
		if err := replaceDir(markdown); err != nil {
			return err
		}
		if err := doc.GenMarkdownTree(docsTree(), markdown); err != nil {
			return err
		}
		if err := writePage(filepath.Join(markdown, "custodyd.md"), func(f *os.File) error { return doc.GenMarkdown(daemonCmd(), f) }); err != nil {
			return err
		}
	}
	if man != "" {
		if err := os.MkdirAll(man, 0o755); err != nil {
			return err
		}
		header := &doc.GenManHeader{Title: "CUSTODY", Section: "1", Source: "custody", Manual: "custody manual"}
		if err := doc.GenManTree(docsTree(), header, man); err != nil {
			return err
		}
	}
	if schemas != "" {
		if err := replaceDir(schemas); err != nil {
			return err
		}
		for _, p := range schemaPages() {
			b, err := schemadoc.Markdown(p.title, p.command, p.schema)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(schemas, p.file), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// replaceDir makes dir and removes the Markdown pages a previous run
// wrote there, so a command or format that went away leaves no page.
func replaceDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range old {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".md") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
