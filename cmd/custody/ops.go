package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/durable"
	"github.com/custody-dev/custody/internal/quote"
	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/keys"
)

// revokeCmd is the one revocation command (operator, control socket): a
// grant, or a key a rotation retired. custodyd records either in its
// signed operations log (custody oplog) before answering.
func (a *app) revokeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "revoke", Short: "Revoke a grant or a retired key; recorded in the operations log (operator)"}
	var reason, at, grantFile string
	grantCmd := &cobra.Command{
		Use:   "grant GRANT-ID [--reason WHY] [--grant-file GRANT.json]",
		Short: "Revoke a grant so that it can never launch (as custody grant revoke); refused for a grant never issued or already spent",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.RevokeRequest{ID: args[0], Reason: reason}
			if grantFile != "" {
				env, err := readFile("grant", grantFile, grant.MaxEnvelopeSize+envelopeSlack)
				if err != nil {
					return err
				}
				req.Grant = bytes.TrimSpace(env)
			}
			return a.revoke(cmd, req, "revoked grant")
		},
	}
	grantCmd.Flags().StringVar(&grantFile, "grant-file", "", "the grant's file, for a grant another issuer this runner trusts signed (it has no issue record here)")
	keyCmd := &cobra.Command{
		Use:   "key runner|issuer KEY-ID [--at RFC3339] [--reason WHY]",
		Short: "Revoke a retired key: nothing it signed from --at (default now) on is trusted; rotate a current key first",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.RevokeKeyRequest{Name: args[0], ID: args[1], Reason: reason}
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return usageError("revoke key: --at %s: want an RFC 3339 time such as 2026-12-01T10:00:00Z", quote.String(at))
				}
				req.RevokedAt = &t
			}
			if err := a.control().RevokeKey(cmd.Context(), req); err != nil {
				return a.fail(cmd, err)
			}
			fmt.Fprintln(a.stdout, "revoked", quote.String(args[0]), "key", quote.String(args[1]))
			return nil
		},
	}
	keyCmd.Flags().StringVar(&at, "at", "", "when the key may first have leaked (RFC 3339; default now)")
	for _, c := range []*cobra.Command{grantCmd, keyCmd} {
		c.Flags().StringVar(&reason, "reason", "", "why (recorded)")
	}
	cmd.AddCommand(grantCmd, keyCmd)
	return cmd
}

// revokeGrant revokes grant id (custody revoke grant, custody grant
// revoke) and prints what, then the id.
func (a *app) revokeGrant(cmd *cobra.Command, id, reason, what string) error {
	return a.revoke(cmd, api.RevokeRequest{ID: id, Reason: reason}, what)
}

// revoke sends req and prints what, then the id.
func (a *app) revoke(cmd *cobra.Command, req api.RevokeRequest, what string) error {
	if err := a.control().Revoke(cmd.Context(), req); err != nil {
		return a.fail(cmd, err)
	}
	fmt.Fprintln(a.stdout, what, quote.String(req.ID))
	return nil
}

// oplogCmd prints the runner's operations log after checking every line's
// signature and chain, against a trust file's runner keys (--trust) or
// the runner keys custodyd reports.
func (a *app) oplogCmd() *cobra.Command {
	var trustPath, checkpoint string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "oplog [--trust trust.yaml] [--checkpoint FILE] [--json]",
		Short: "Print the runner's signed operations log (revocations, retention deletions), checked line by line (operator)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := a.control()
			data, head, err := c.OpLog(cmd.Context())
			if err != nil {
				return a.fail(cmd, err)
			}
			var trusted []*keys.Verifier
			var opts []evidence.OpLogOption
			source := "the runner keys custodyd reports (give --trust to check against yours)"
			if trustPath != "" {
				t, err := evidence.LoadTrust(trustPath)
				if err != nil {
					return &exitError{exitRefused, err}
				}
				now := time.Now()
				for _, k := range t.Runners {
					trusted = append(trusted, k.Key)
					// custodyd signs its head with its current runner key
					// only: a key the file revokes or retired signs none.
					switch {
					case !k.RevokedAt.IsZero():
						opts = append(opts, evidence.RefuseHeadBy(k.ID(), fmt.Sprintf("the trust file revokes (revokedAt %s)", k.RevokedAt.Format(time.RFC3339))))
					case !k.NotAfter.IsZero() && !now.Before(k.NotAfter):
						opts = append(opts, evidence.RefuseHeadBy(k.ID(), fmt.Sprintf("the trust file retires (notAfter %s)", k.NotAfter.Format(time.RFC3339))))
					}
				}
				source = "the runner keys of " + trustPath
			} else {
				ks, err := c.Keys(cmd.Context())
				if err != nil {
					return a.fail(cmd, err)
				}
				for _, k := range ks.Runners {
					v, err := keys.ParsePublic([]byte(k.PEM))
					if err != nil {
						return fmt.Errorf("runner key %s: %w", k.ID, err)
					}
					trusted = append(trusted, v)
					if k.Current {
						opts = append(opts, evidence.HeadSignedBy(v.ID()))
					}
				}
			}
			var seen *evidence.OpHead
			if checkpoint != "" {
				if seen, err = readCheckpoint(checkpoint); err != nil {
					return err
				}
				if seen != nil {
					opts = append(opts, evidence.AtLeast(*seen))
				}
			}
			entries, err := evidence.VerifyOpLog(cmd.Context(), data, head, trusted, opts...)
			if err != nil {
				return &exitError{exitRefused, fmt.Errorf("%w (checked against %s)", err, source)}
			}
			if checkpoint != "" && head != nil {
				h, err := evidence.ParseOpHead(head)
				if err != nil {
					return err
				}
				if seen == nil || h.Seq > seen.Seq {
					if err := writeCheckpoint(checkpoint, h); err != nil {
						return err
					}
				}
				fmt.Fprintf(a.stderr, "custody: the log reaches seq %d, the highest head seen (checkpoint %s)\n", h.Seq, quote.String(checkpoint))
			}
			if asJSON {
				if entries == nil {
					entries = []evidence.OpEntry{}
				}
				return writeJSON(a.stdout, map[string]any{"entries": entries})
			}
			for _, e := range entries {
				fmt.Fprintf(a.stdout, "%d %s %s", e.Seq, e.At.Format(time.RFC3339), e.Kind)
				if e.UID != nil {
					fmt.Fprintf(a.stdout, " uid=%d", *e.UID)
				}
				switch {
				case e.Grant != "":
					fmt.Fprintf(a.stdout, " grant=%s", quote.String(e.Grant))
				case e.Key != nil:
					fmt.Fprintf(a.stdout, " %s key=%s revokedAt=%s", e.Key.Name, e.Key.ID, e.Key.RevokedAt.Format(time.RFC3339))
				}
				if e.Reason != "" {
					fmt.Fprintf(a.stdout, " reason=%s", quote.String(e.Reason))
				}
				fmt.Fprintln(a.stdout)
				for _, d := range e.Deleted {
					if d.Run != "" {
						fmt.Fprintf(a.stdout, "  run %s receipt %s finished %s (%s)\n", quote.String(d.Run), d.Receipt, d.Finished.Format(time.RFC3339), d.Why)
					} else {
						fmt.Fprintf(a.stdout, "  output %s (%s)\n", quote.String(d.Output), d.Why)
					}
				}
			}
			fmt.Fprintf(a.stderr, "custody: %d entries, every line signed and chained, ending at its signed head (checked against %s)\n", len(entries), source)
			return nil
		},
	}
	cmd.Flags().StringVar(&trustPath, "trust", "", "check against this trust file's runner keys")
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "keep the highest head seen in this file (made on first use): a log that no longer reaches it, rolled back or replaced, is refused")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// checkpoint is what custody oplog --checkpoint keeps: the highest head
// of the runner's operations log seen (its seq and last line's digest).
type checkpoint struct {
	Seq  int64  `json:"seq"`
	Last string `json:"last"`
}

// readCheckpoint reads a checkpoint file, nil if there is none yet.
func readCheckpoint(path string) (*evidence.OpHead, error) {
	b, err := regfile.ReadFile(path, 4<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var c checkpoint
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&c)
	}
	if err == nil && (c.Seq < 1 || len(c.Last) != 64) {
		err = fmt.Errorf("seq %d, last %q: not a head", c.Seq, c.Last)
	}
	if err != nil {
		return nil, &exitError{exitRefused, fmt.Errorf("refused: checkpoint %s: %w; fix: restore it (a copy kept elsewhere), or remove it to start one from the log as it stands", quote.String(path), err)}
	}
	return &evidence.OpHead{Seq: c.Seq, Last: c.Last}, nil
}

// writeCheckpoint replaces the checkpoint file with h, whole.
func writeCheckpoint(path string, h evidence.OpHead) error {
	b, err := json.Marshal(checkpoint{Seq: h.Seq, Last: h.Last})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := durable.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("checkpoint %s: %w", quote.String(path), err)
	}
	return nil
}
