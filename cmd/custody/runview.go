package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/quote"
)

// resultCmd fetches a recorded run after the fact: after Ctrl-C, or a run
// started without --receipt, its result, receipt and outputs are still the
// daemon's to hand out.
func (a *app) resultCmd() *cobra.Command {
	var receiptPath, outputsDir string
	var asJSON, operator bool
	cmd := &cobra.Command{
		Use:   "result RUN-ID [--receipt out/receipt.json [--outputs DIR]]",
		Short: "Fetch the recorded result of one of your runs, and with --receipt its receipt and outputs",
		Args:  cobra.ExactArgs(1),
		RunE: a.jsonRunE(&asJSON, func(cmd *cobra.Command, args []string) error {
			if outputsDir != "" && receiptPath == "" {
				return &exitError{exitUsage, fmt.Errorf("--outputs needs --receipt: outputs are only saved beside the receipt that binds them")}
			}
			if receiptPath != "" && outputsDir == "" {
				outputsDir = filepath.Join(filepath.Dir(receiptPath), "outputs")
			}
			// Refused before anything is fetched, as for custody run.
			if err := freshEvidence(receiptPath, outputsDir); err != nil {
				return err
			}
			c := a.client(operator)
			res, err := c.GetRun(cmd.Context(), args[0])
			if err != nil {
				return a.fail(cmd, err)
			}
			if receiptPath != "" {
				if res.Status == api.StatusRefused {
					return &exitError{exitRefused, fmt.Errorf("refused: run %s was refused before it launched, so it has no receipt or outputs; fix: drop --receipt", quote.String(res.RunID))}
				}
				rc, err := c.GetReceipt(cmd.Context(), res.RunID)
				if err != nil {
					return a.fail(cmd, err)
				}
				if err := a.saveEvidence(cmd.Context(), c, res, rc, receiptPath, outputsDir); err != nil {
					return &exitError{exitInternal, err}
				}
			}
			if asJSON {
				return writeJSON(a.stdout, res)
			}
			printResult(a.stdout, res)
			return nil
		}),
	}
	cmd.Flags().StringVar(&receiptPath, "receipt", "", "also write the run's signed receipt here (and its Sigstore bundle as *.sigstore.json); refused if either exists")
	cmd.Flags().StringVar(&outputsDir, "outputs", "", "with --receipt: fetch the retained outputs into this new directory (default: outputs/ beside the receipt)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&operator, "operator", false, "use the control socket (any run)")
	return cmd
}

// logsCmd prints a finished run's kept stdout or stderr, after checking it
// against the digest the run's result records (the one its receipt binds).
func (a *app) logsCmd() *cobra.Command {
	var stream string
	var operator bool
	cmd := &cobra.Command{
		Use:   "logs RUN-ID [--stream stdout|stderr]",
		Short: "Print a finished run's stdout or stderr as the runner kept it, checked against its recorded digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stream != "stdout" && stream != "stderr" {
				return &exitError{exitUsage, fmt.Errorf("--stream %s: a run has stdout and stderr", quote.String(stream))}
			}
			c := a.client(operator)
			res, err := c.GetRun(cmd.Context(), args[0])
			if err != nil {
				return a.fail(cmd, err)
			}
			if res.Streams == nil {
				return &exitError{exitRefused, fmt.Errorf("refused: run %s (%s) never ran a workload, so it has no %s; fix: custody result %s says why",
					quote.String(res.RunID), quote.String(string(res.Status)), stream, quote.String(res.RunID))}
			}
			want := res.Streams.Stdout
			if stream == "stderr" {
				want = res.Streams.Stderr
			}
			var buf bytes.Buffer
			if _, err := c.GetLog(cmd.Context(), res.RunID, stream, &buf); err != nil {
				return a.fail(cmd, err)
			}
			sum := sha256.Sum256(buf.Bytes())
			if got := hex.EncodeToString(sum[:]); got != want.SHA256 || int64(buf.Len()) != want.Bytes {
				return &exitError{exitInternal, fmt.Errorf("run %s %s: the kept log (sha256:%s, %d bytes) is not the stream the run recorded (sha256:%s, %d bytes); nothing printed",
					quote.String(res.RunID), stream, got, buf.Len(), want.SHA256, want.Bytes)}
			}
			// The workload's bytes, as custody run forwards them.
			if _, err := a.stdout.Write(buf.Bytes()); err != nil {
				return err
			}
			note := ""
			if want.Truncated {
				note = " (truncated: the workload wrote more, which was discarded)"
			}
			fmt.Fprintf(a.stderr, "custody: run %s %s sha256:%s %d bytes, as its result and receipt record%s\n",
				quote.String(res.RunID), stream, want.SHA256, want.Bytes, note)
			return nil
		},
	}
	cmd.Flags().StringVar(&stream, "stream", "stdout", "stdout or stderr")
	cmd.Flags().BoolVar(&operator, "operator", false, "use the control socket (any run)")
	return cmd
}
