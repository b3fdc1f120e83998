package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/quote"
	"github.com/custody-dev/custody/pipeline"
	"github.com/custody-dev/custody/request"
)

// Stage states of a pipeline record.
const (
	stagePending    = "pending"     // not reached
	stageNotGranted = "not-granted" // the operator's policy issued no grant: it did not run
	stageRunning    = "running"
	stageSkipped    = "skipped" // an earlier stage failed or was not granted
	stageUnknown    = "unknown" // the run's end was not heard (custody result RUN)
)

// pipelineRecord is what `custody pipeline run` writes to RUN/pipeline.json
// as it goes, and `custody pipeline status RUN` reads. It is the client's
// account; the receipts and the signed summary beside it are the evidence.
type pipelineRecord struct {
	ID       string `json:"id"`
	Pipeline string `json:"pipeline"`
	File     string `json:"file"`
	FileHash string `json:"fileSha256"`
	Actor    string `json:"actor"`
	// Authorization is the standing authorization every stage was run
	// under (custody pipeline run --authorization); empty for grants.
	Authorization string        `json:"authorization,omitempty"`
	Started       time.Time     `json:"started"`
	Finished      time.Time     `json:"finished,omitzero"`
	Stages        []stageRecord `json:"stages"`
	// Summary is the signed summary's file name, once custodyd signed it.
	Summary string `json:"summary,omitempty"`
	Error   string `json:"error,omitempty"`
}

type stageRecord struct {
	Name     string `json:"name"`
	Stage    string `json:"stage"`
	Verifier bool   `json:"verifier,omitempty"`
	// State is a run status (ok, failed, ...) or one of the stage states.
	State         string   `json:"state"`
	GrantID       string   `json:"grantId,omitempty"`
	RunID         string   `json:"runId,omitempty"`
	ReceiptDigest string   `json:"receiptDigest,omitempty"`
	Receipt       string   `json:"receipt,omitempty"`
	InputDigests  []string `json:"inputDigests,omitempty"`
	OutputDigest  string   `json:"outputDigest,omitempty"`
	Error         string   `json:"error,omitempty"`
}

const (
	pipelineRecordName  = "pipeline.json"
	pipelineSummaryName = "pipeline-summary.json"
)

func (a *app) pipelineCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "pipeline", Short: "Admit, run and inspect phase pipelines (each stage its own grant and receipt)"}
	cmd.AddCommand(a.pipelineAdmitCmd(), a.pipelineRunCmd(), a.pipelineStatusCmd())
	return cmd
}

// loadPipeline parses a pipeline file locally (a malformed one never
// leaves this machine) and hashes its bytes for the record.
func loadPipeline(path string) (*pipeline.Pipeline, string, error) {
	data, err := readFile("pipeline", path, pipeline.MaxSize)
	if err != nil {
		return nil, "", err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	// The bytes parsed are the bytes hashed.
	p, err := pipeline.ParseIn(data, filepath.Dir(abs))
	if err != nil {
		return nil, "", &exitError{exitRefused, fmt.Errorf("refused: %s: %w", path, err)}
	}
	sum := sha256.Sum256(data)
	return p, hex.EncodeToString(sum[:]), nil
}

// phaseSource is a stage's phase as custodyd takes a phase: its canonical
// JSON (YAML's subset), every host source already absolute.
func phaseSource(ph *request.Phase) (api.PhaseSource, error) {
	b, err := ph.Canonical()
	if err != nil {
		return api.PhaseSource{}, err
	}
	return api.PhaseSource{YAML: b, BaseDir: "/"}, nil
}

type stageAdmission struct {
	Name     string             `json:"name"`
	Admitted bool               `json:"admitted"`
	Plan     json.RawMessage    `json:"plan,omitempty"`
	Checks   []api.Check        `json:"checks"`
	Later    []resolvedAtRunRef `json:"resolvedAtRun,omitempty"`
}

type resolvedAtRunRef struct {
	Input  int    `json:"input"`
	From   string `json:"from"`
	Target string `json:"target"`
}

func (a *app) pipelineAdmitCmd() *cobra.Command {
	var asJSON bool
	var actor string
	cmd := &cobra.Command{
		Use:   "admit PIPELINE.yaml",
		Short: "Dry run of every stage: its plan, or every refused requirement (grants nothing, runs nothing)",
		Long: "Admit every stage as `custody admit` admits a phase, one decision per stage. An input taken from an\n" +
			"earlier stage's output is not known yet: it is listed as resolved at run, and admitted then, by digest.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, _, err := loadPipeline(args[0])
			if err != nil {
				return err
			}
			var out []stageAdmission
			all := true
			for i, st := range p.Stages {
				ph, later := p.ForAdmission(i)
				src, err := phaseSource(ph)
				if err != nil {
					return err
				}
				src.ResolvedAtRun = later
				resp, err := a.submit().Admit(cmd.Context(), api.AdmitRequest{PhaseSource: src, Actor: actor})
				if err != nil {
					return a.fail(cmd, err)
				}
				sa := stageAdmission{Name: st.Name, Admitted: resp.Admitted, Plan: resp.Plan, Checks: resp.Checks}
				for _, j := range later {
					sa.Later = append(sa.Later, resolvedAtRunRef{Input: j, From: st.Inputs[j].From, Target: st.Inputs[j].Target})
				}
				all = all && resp.Admitted
				out = append(out, sa)
			}
			if asJSON {
				if err := writeJSON(a.stdout, map[string]any{"pipeline": p.Name, "admitted": all, "stages": out}); err != nil {
					return err
				}
			} else {
				for _, sa := range out {
					verdict := "admitted"
					if !sa.Admitted {
						verdict = "REFUSED"
					}
					fmt.Fprintf(a.stdout, "stage %s: %s\n", quote.String(sa.Name), verdict)
					printChecks(a.stdout, 30, sa.Checks)
					for _, l := range sa.Later {
						fmt.Fprintf(a.stdout, "%-30s from %s\n", fmt.Sprintf("inputs[%d]", l.Input), quote.String(l.From))
					}
				}
			}
			if !all {
				return &exitError{exitRefused, errors.New("pipeline admit: refused (the stages above)")}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "the actor the stages' grants would be issued to (default: the one actor this user submits as)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) pipelineRunCmd() *cobra.Command {
	var actor, authorization, ttl, dir string
	cmd := &cobra.Command{
		Use:   "run PIPELINE.yaml (--actor NAME | --authorization NAME) [--dir RUN]",
		Short: "Run every stage in order: the operator's policy issues each its grant, then it runs and is receipted",
		Long: "For each stage in order: custodyd's policy issues the stage's grant (control socket, as custody grant issue),\n" +
			"the stage runs on that grant (submit socket), and its receipt and outputs are saved under RUN/receipts and\n" +
			"RUN/outputs. A stage whose inputs are earlier outputs names them by digest. A stage without a grant does not\n" +
			"run, and a failed stage stops the pipeline. When every stage succeeded, custodyd signs RUN/pipeline-summary.json.\n" +
			"RUN/pipeline.json records each stage's state as it goes (custody pipeline status RUN).\n\n" +
			"With --authorization NAME instead of --actor, everything goes over the submit socket: custodyd mints each\n" +
			"stage its own single-use grant under the standing authorization (which must allow pipelines, and verifier\n" +
			"stages for a verifier stage), and signs the summary once every stage was minted under it for you.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (actor == "") == (authorization == "") {
				return &exitError{exitUsage, errors.New("give --actor NAME (grants issued on the control socket) or --authorization NAME (grants minted on the submit socket)")}
			}
			p, fileHash, err := loadPipeline(args[0])
			if err != nil {
				return err
			}
			id, err := newPipelineID()
			if err != nil {
				return &exitError{exitInternal, err}
			}
			if dir == "" {
				dir = "pipeline-" + id
			}
			if _, err := os.Lstat(dir); err == nil {
				return &exitError{exitRefused, fmt.Errorf("refused: %s already exists; a pipeline run writes into a fresh directory (choose another --dir)", quote.String(dir))}
			}
			if err := os.MkdirAll(filepath.Join(dir, "receipts"), 0o755); err != nil {
				return &exitError{exitInternal, err}
			}
			abs, _ := filepath.Abs(args[0])
			rec := &pipelineRecord{ID: id, Pipeline: p.Name, File: abs, FileHash: fileHash, Actor: actor, Authorization: authorization, Started: time.Now().UTC()}
			for _, st := range p.Stages {
				rec.Stages = append(rec.Stages, stageRecord{Name: st.Name, Stage: string(st.Phase.Stage), Verifier: st.Verifier, State: stagePending})
			}
			fmt.Fprintf(a.stderr, "custody: pipeline %s run %s in %s\n", quote.String(p.Name), id, quote.String(dir))
			return a.runPipeline(cmd, p, rec, dir, ttl)
		},
	}
	cmd.Flags().StringVar(&actor, "actor", "", "who each stage's grant is for (policy must allow the actor every stage)")
	cmd.Flags().StringVar(&authorization, "authorization", "", "run every stage under this standing authorization instead (submit socket only; see custody authorizations)")
	cmd.Flags().StringVar(&ttl, "ttl", "15m", "how long each stage's grant is valid (with --actor)")
	cmd.Flags().StringVar(&dir, "dir", "", "the run's new directory: record, receipts, outputs, summary (default ./pipeline-<id>)")
	return cmd
}

// runPipeline runs the stages in order and records each as it goes.
func (a *app) runPipeline(cmd *cobra.Command, p *pipeline.Pipeline, rec *pipelineRecord, dir, ttl string) error {
	ctx := cmd.Context()
	save := func() error { return writeRecord(filepath.Join(dir, pipelineRecordName), rec) }
	stop := func(i int, code int, err error) error {
		for j := i + 1; j < len(rec.Stages); j++ {
			rec.Stages[j].State = stageSkipped
		}
		rec.Finished, rec.Error = time.Now().UTC(), err.Error()
		if serr := save(); serr != nil {
			return &exitError{exitInternal, fmt.Errorf("%w; and the record: %v", err, serr)}
		}
		return &exitError{code, err}
	}
	if err := save(); err != nil {
		return &exitError{exitInternal, err}
	}
	outputs := map[string]string{}
	refs := make([]api.PipelineStageRef, 0, len(p.Stages))
	for i, st := range p.Stages {
		sr := &rec.Stages[i]
		ph, err := p.Resolve(i, outputs)
		if err != nil {
			return stop(i-1, exitRefused, err)
		}
		src, err := phaseSource(ph)
		if err != nil {
			return stop(i-1, exitInternal, err)
		}
		c := a.submit()
		started := func(id string) {
			sr.RunID = id
			fmt.Fprintf(a.stderr, "custody: stage %s run %s started\n", quote.String(st.Name), quote.String(id))
		}
		var res *api.Result
		var rc *api.Receipt
		if rec.Authorization != "" {
			// custodyd mints the stage's grant, or refuses it before
			// anything runs.
			sr.State = stageRunning
			if err := save(); err != nil {
				return &exitError{exitInternal, err}
			}
			res, rc, err = c.RunAuthorized(ctx, rec.Authorization, src, a.stdout, a.stderr, started)
			var ae *api.Error
			if res == nil && errors.As(err, &ae) {
				sr.State, sr.Error = stageNotGranted, err.Error()
				ferr := a.fail(cmd, err)
				return stop(i, exitCode(ferr, exitRefused), fmt.Errorf("stage %s: not minted under authorization %s, so it did not run: %w", quote.String(st.Name), quote.String(rec.Authorization), err))
			}
			if res != nil {
				sr.GrantID = res.GrantID
			}
		} else {
			// No grant, no run: the operator's policy decides each stage.
			g, ierr := a.control().IssueGrant(ctx, api.IssueRequest{Phase: src, Actor: rec.Actor, TTL: ttl})
			if ierr != nil {
				sr.State, sr.Error = stageNotGranted, ierr.Error()
				ferr := a.fail(cmd, ierr)
				return stop(i, exitCode(ferr, exitRefused), fmt.Errorf("stage %s: no grant, so it did not run: %w", quote.String(st.Name), ierr))
			}
			sr.State, sr.GrantID = stageRunning, grantID(g)
			if err := save(); err != nil {
				return &exitError{exitInternal, err}
			}
			fmt.Fprintf(a.stderr, "custody: stage %s (%s) granted %s\n", quote.String(st.Name), ph.Stage, sr.GrantID)
			res, rc, err = c.RunWithReceipt(ctx, g, a.stdout, a.stderr, started)
		}
		if res != nil {
			sr.State, sr.RunID = string(res.Status), res.RunID
			for _, in := range res.Inputs {
				sr.InputDigests = append(sr.InputDigests, in.Digest)
			}
			if res.Output != nil {
				sr.OutputDigest = res.Output.Digest
			}
		}
		if res != nil && res.Status != api.StatusRefused {
			sr.Receipt = filepath.Join("receipts", st.Name+".json")
			if serr := a.saveEvidence(ctx, c, res, rc, filepath.Join(dir, sr.Receipt), filepath.Join(dir, "outputs", st.Name)); serr != nil {
				return stop(i, exitInternal, fmt.Errorf("stage %s: %w", quote.String(st.Name), serr))
			}
			if d, derr := evidence.ReceiptDigest(rc.Envelope); derr == nil {
				sr.ReceiptDigest = d
			}
		}
		if err != nil {
			sr.Error = err.Error()
			if res == nil {
				// custodyd's record says how it ended: custody result RUN.
				sr.State = stageUnknown
			}
			return stop(i, exitCode(a.fail(cmd, err), exitInternal), fmt.Errorf("stage %s: %w", quote.String(st.Name), err))
		}
		if res.Status != api.StatusOK {
			return stop(i, exitFailed, fmt.Errorf("stage %s: run %s %s; the pipeline stops", quote.String(st.Name), quote.String(res.RunID), quote.String(string(res.Status))))
		}
		outputs[st.Name] = sr.OutputDigest
		ref := api.PipelineStageRef{Name: st.Name, RunID: res.RunID, Verifier: st.Verifier, From: make([]string, len(st.Inputs))}
		for j, in := range st.Inputs {
			if in.From != "" {
				ref.From[j] = in.FromStage()
			}
		}
		refs = append(refs, ref)
		if err := save(); err != nil {
			return &exitError{exitInternal, err}
		}
	}
	signer := a.control()
	if rec.Authorization != "" {
		// A pipeline run under an authorization holds the submit socket only.
		signer = a.submit()
	}
	env, err := signer.SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: p.Name, Stages: refs, Authorization: rec.Authorization})
	if err != nil {
		return stop(len(p.Stages)-1, exitCode(a.fail(cmd, err), exitInternal), fmt.Errorf("summary: %w", err))
	}
	if err := writeNew(filepath.Join(dir, pipelineSummaryName), append(env, '\n')); err != nil {
		return stop(len(p.Stages)-1, exitInternal, fmt.Errorf("write summary: %w", err))
	}
	rec.Summary, rec.Finished = pipelineSummaryName, time.Now().UTC()
	if err := save(); err != nil {
		return &exitError{exitInternal, err}
	}
	a.printPipeline(rec)
	fmt.Fprintf(a.stderr, "custody: summary %s (check it: custody verify %s --trust TRUST)\n",
		quote.String(filepath.Join(dir, pipelineSummaryName)), quote.String(filepath.Join(dir, pipelineSummaryName)))
	return nil
}

// newPipelineID names a pipeline run: 16 random hex digits.
func newPipelineID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// exitCode is err's exit code, def when it has none.
func exitCode(err error, def int) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return def
}

// grantID reads the id of a grant custodyd just issued (for the record
// only; the daemon verifies the grant at launch).
func grantID(env []byte) string {
	var e struct {
		Payload []byte `json:"payload"`
	}
	var st struct {
		Predicate struct {
			ID string `json:"id"`
		} `json:"predicate"`
	}
	if json.Unmarshal(env, &e) != nil || json.Unmarshal(e.Payload, &st) != nil {
		return ""
	}
	return st.Predicate.ID
}

// writeRecord replaces the record whole (a temporary file renamed over
// it), so a reader never sees half of one.
func writeRecord(path string, rec *pipelineRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (a *app) printPipeline(rec *pipelineRecord) {
	fmt.Fprintf(a.stdout, "pipeline %s run %s actor %s\n", quote.String(rec.Pipeline), quote.String(rec.ID), quote.String(rec.Actor))
	for _, s := range rec.Stages {
		fmt.Fprintf(a.stdout, "%-16s %-12s grant=%s run=%s receipt=%s output=%s\n", quote.String(s.Name), quote.String(s.State),
			orDash(s.GrantID), orDash(quote.String(s.RunID)), orDash(s.ReceiptDigest), orDash(s.OutputDigest))
	}
	if rec.Summary != "" {
		fmt.Fprintf(a.stdout, "summary %s\n", quote.String(rec.Summary))
	}
	if rec.Error != "" {
		fmt.Fprintf(a.stdout, "stopped: %s\n", quote.Message(rec.Error))
	}
}

func orDash(s string) string {
	if s == "" || s == `""` {
		return "-"
	}
	return s
}

func (a *app) pipelineStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "Per stage of a pipeline run (its directory): state, grant, receipt digest, output digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := readFile("pipeline record", filepath.Join(args[0], pipelineRecordName), 4<<20)
			if err != nil {
				return err
			}
			var rec pipelineRecord
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rec); err != nil {
				return &exitError{exitRefused, fmt.Errorf("refused: %s is not a pipeline record: %w", quote.String(args[0]), err)}
			}
			if asJSON {
				return writeJSON(a.stdout, rec)
			}
			a.printPipeline(&rec)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// verifyPipeline verifies a pipeline summary: its signature, then each
// stage receipt from receiptsDir (RUN/receipts beside the summary by
// default) with its outputs from RUN/outputs/<stage> when present, and
// every link.
func (a *app) verifyPipeline(ctx context.Context, env []byte, summaryPath, trustPath, receiptsDir string, asJSON bool) error {
	v, err := loadVerifier(trustPath)
	if err != nil {
		return err
	}
	base := filepath.Dir(summaryPath)
	if receiptsDir == "" {
		receiptsDir = filepath.Join(base, "receipts")
	}
	res, err := v.VerifyPipeline(ctx, env, func(name string) (evidence.StageEvidence, error) {
		rc, err := readReceipt(filepath.Join(receiptsDir, name+".json"))
		if err != nil {
			return evidence.StageEvidence{}, err
		}
		ev := evidence.StageEvidence{Receipt: rc}
		if out := filepath.Join(base, "outputs", name); isDir(out) {
			ev.Outputs = out
		}
		return ev, nil
	})
	if err != nil {
		return &exitError{verifyUnauthentic, err}
	}
	return a.verdict(res, asJSON, res.Checks, "pipeline summary", res.OK, "promotable", res.Promotable)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
