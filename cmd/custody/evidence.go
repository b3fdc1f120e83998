package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/quote"
	"github.com/custody-dev/custody/internal/untar"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/snapshot"
)

// bundlePath is where the Sigstore bundle of a receipt goes:
// out/receipt.json → out/receipt.sigstore.json.
func bundlePath(receipt string) string {
	return strings.TrimSuffix(receipt, filepath.Ext(receipt)) + ".sigstore.json"
}

// freshEvidence refuses, before anything is asked of custodyd (so the
// grant is not spent), a receipt path, its bundle's or an outputs
// directory that already exists: a rerun must never leave a receipt
// beside the outputs of another run.
func freshEvidence(receiptPath, outputsDir string) error {
	if err := freshReceipt(receiptPath); err != nil {
		return err
	}
	if receiptPath == "" {
		return nil
	}
	if _, err := os.Lstat(outputsDir); err == nil {
		return &exitError{exitRefused, fmt.Errorf("refused: %s already exists, and outputs go into a fresh directory beside their receipt; fix: choose a new --receipt path (or --outputs DIR)", quote.String(outputsDir))}
	}
	return nil
}

// saveEvidence writes the run's outputs, then its receipt and bundle. The
// outputs go into a fresh directory renamed into place whole, and each
// receipt file is created new (never over another), so a receipt never
// sits beside outputs it does not describe.
func (a *app) saveEvidence(ctx context.Context, c *api.Client, res *api.Result, rc *api.Receipt, receiptPath, outputsDir string) error {
	if rc == nil {
		return fmt.Errorf("run %s: no receipt was issued", res.RunID)
	}
	if err := os.MkdirAll(filepath.Dir(receiptPath), 0o755); err != nil {
		return err
	}
	// Outputs that cannot be saved leave no directory; the receipt is
	// still written, as the run's evidence (verify then says the outputs
	// are missing), unless a directory appeared there meanwhile.
	var outErr error
	if res.Output != nil {
		var buf bytes.Buffer
		if err := c.GetOutputs(ctx, res.RunID, &buf); err != nil {
			outErr = fmt.Errorf("fetch outputs: %w", err)
		} else if err := extract(ctx, &buf, outputsDir); err != nil {
			outErr = fmt.Errorf("write outputs: %w", err)
		} else if err := savedWhole(outputsDir, res.Output); err != nil {
			outErr = err
		}
	}
	if outErr != nil {
		if _, err := os.Lstat(outputsDir); err == nil {
			return fmt.Errorf("%w; the receipt is not written beside outputs of something else (custodyd keeps the run's result)", outErr)
		}
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{receiptPath, rc.Envelope}, {bundlePath(receiptPath), rc.Bundle}} {
		if err := writeNew(f.path, append(append([]byte{}, f.data...), '\n')); err != nil {
			return fmt.Errorf("write receipt: %w", err)
		}
	}
	fmt.Fprintf(a.stderr, "custody: receipt %s, bundle %s\n", quote.String(receiptPath), quote.String(bundlePath(receiptPath)))
	if outErr != nil {
		return outErr
	}
	if res.Output != nil {
		fmt.Fprintf(a.stderr, "custody: outputs %s (check them: custody verify %s --trust TRUST --outputs %s)\n",
			quote.String(outputsDir), quote.String(receiptPath), quote.String(outputsDir))
	}
	return nil
}

// savedWhole checks that every file the run's record lists was saved in
// dir; if not, it removes dir (this command made it, and a partial tree
// must not pass for the run's outputs) and names what is missing.
func savedWhole(dir string, o *api.Output) error {
	paths := make([]string, len(o.Files))
	for i, f := range o.Files {
		paths[i] = f.Path
	}
	err := evidence.MissingOutputs(dir, paths)
	if err == nil {
		return nil
	}
	if rerr := os.RemoveAll(dir); rerr != nil {
		return fmt.Errorf("fetch outputs: %w; and removing the partial %s failed: %v", err, quote.String(dir), rerr)
	}
	return fmt.Errorf("fetch outputs: %w (the partial copy was removed)", err)
}

// extract unpacks a tar of outputs into dir, which must not exist: into a
// fresh directory beside it first, renamed into place only when complete
// and never over anything there, and without ever writing through a link
// or outside it. The bytes are checked against the signed receipt by
// custody verify, not trusted here.
func extract(ctx context.Context, r io.Reader, dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("%s already exists; outputs go into a fresh directory", quote.String(dir))
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".partial-")
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	w, err := snapshot.NewWriter(tmp)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	err = untar.Extract(ctx, r, w, untar.Options{Symlinks: true, DirMode: 0o755})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// RENAME_NOREPLACE: a directory made there meanwhile (even an empty
		// one, which a plain rename would replace) is kept and refused.
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
	}
	return err
}

// Exit codes of custody verify.
const (
	verifyPromotable  = 0 // authentic and acceptable: may be promoted
	verifyAuthentic   = 1 // authentic, but policy says no (failed run, stale, wrong tier, ...)
	verifyUnauthentic = 2 // not authentic: signature, trust, grant or bytes do not hold
)

func (a *app) verifyCmd() *cobra.Command {
	var trustPath, outputs, composePath, receiptsDir string
	var noOutputs, asJSON bool
	cmd := &cobra.Command{
		Use:   "verify RECEIPT.json --trust TRUST.yaml (--outputs DIR | --compose FILE) | verify pipeline-summary.json --trust TRUST.yaml",
		Short: "Verify a receipt: signature, issuer trust, revocation, grant, freshness, tier, retained bytes, exit and cleanup",
		Long: "Verify a phase receipt (with --outputs DIR, its retained output files) or a pack receipt of an up or a down\n" +
			"(with --compose FILE, the compose file it vouches for), under the same trust file; or a pipeline summary:\n" +
			"its signature, every stage receipt it names (from receipts/ beside it, or --receipts DIR; each stage's\n" +
			"outputs from outputs/<stage> beside it when present) and every link by digest.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := readReceipt(args[0])
			if err != nil {
				return err
			}
			if env, err = a.checkBundle(args[0], env, asJSON); err != nil {
				return err
			}
			// Dispatch on the claimed predicate type; the verifier it picks
			// checks the claim with everything else.
			if evidence.IsPackReceipt(env) {
				return a.verifyPack(cmd.Context(), env, trustPath, outputs, composePath, asJSON)
			}
			if evidence.IsPipelineSummary(env) {
				return a.verifyPipeline(cmd.Context(), env, args[0], trustPath, receiptsDir, asJSON)
			}
			if composePath != "" {
				return &exitError{verifyUnauthentic, errors.New("--compose applies to pack receipts only; this is not one (a phase receipt checks --outputs DIR)")}
			}
			res, _, err := a.verify(cmd.Context(), env, trustPath, outputs, noOutputs)
			if err != nil {
				return err
			}
			if !asJSON {
				a.printRan(res)
				a.printBackend(res.Receipt)
			}
			return a.verdict(res, asJSON, res.Checks, "receipt", res.OK, "promotable", res.Promotable)
		},
	}
	cmd.Flags().StringVar(&trustPath, "trust", "", "trust file (runner and issuer keys, freshness, tiers)")
	cmd.Flags().StringVar(&outputs, "outputs", "", "directory holding the retained outputs to check byte for byte")
	cmd.Flags().BoolVar(&noOutputs, "no-outputs-unsafe", false, "skip the retained-bytes check (the receipt is then never promotable by this run)")
	cmd.Flags().StringVar(&composePath, "compose", "", "for a pack receipt: the compose file to check byte for byte against it")
	cmd.Flags().StringVar(&receiptsDir, "receipts", "", "for a pipeline summary: the directory of its stage receipts, <stage>.json (default: receipts/ beside it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print every check as JSON")
	_ = cmd.MarkFlagRequired("trust")
	return cmd
}

// checkBundle reads the Sigstore bundle form beside a receipt: given a
// bundle (receipt.sigstore.json), it returns the envelope the bundle holds;
// given an envelope, it returns it as it is. Either way, when the other
// form sits beside it, the two must hold the same signed envelope, or the
// receipt is refused as unauthentic before anything else is checked: a
// reviewer handed both must never see them disagree.
func (a *app) checkBundle(path string, env []byte, asJSON bool) ([]byte, error) {
	unauthentic := func(err error) error { return &exitError{verifyUnauthentic, err} }
	bundle, envelopePath, bundleFile := []byte(nil), path, bundlePath(path)
	if evidence.IsBundle(env) {
		bundle, bundleFile = env, path
		envelopePath = strings.TrimSuffix(path, ".sigstore.json") + ".json"
		e, err := evidence.EnvelopeOfBundle(bundle)
		if err != nil {
			return nil, unauthentic(err)
		}
		env = e
		if envelopePath == path {
			return env, nil // no sibling name to look for
		}
	}
	other := bundleFile
	if bundle != nil {
		other = envelopePath
	}
	sibling, err := readFile("receipt", other, evidence.MaxEnvelopeSize+envelopeSlack)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return env, nil
	case err != nil:
		return nil, unauthentic(err)
	}
	if bundle == nil {
		bundle = sibling
	} else {
		env = bytes.TrimSpace(sibling)
	}
	if err := evidence.MatchBundle(env, bundle); err != nil {
		return nil, unauthentic(fmt.Errorf("%s and %s: %w", envelopePath, bundleFile, err))
	}
	if !asJSON {
		fmt.Fprintf(a.stdout, "bundle   %s holds the same signed envelope as %s\n", quote.String(bundleFile), quote.String(envelopePath))
	}
	return env, nil
}

// printRan prints what an authentic receipt says ran, as its grant
// authorized it and the runner recorded it: the phase, command, image,
// inputs with their digests, the names of the env variables (never their
// values: a reviewer's terminal is not the place for them), budgets, exit
// and tier. An unauthentic receipt prints nothing here: nothing in it can
// be trusted to describe a run.
func (a *app) printRan(res *evidence.Result) {
	r, g := res.Receipt, res.Grant
	if r == nil || g == nil {
		return
	}
	w := a.stdout
	fmt.Fprintf(w, "ran      phase %s (stage %s) for actor %s, tier %s, backend %s\n",
		quote.String(r.Phase.Name), quote.String(r.Phase.Stage), quote.String(g.Actor), quote.String(r.Profile.Tier), quote.String(backendName(r)))
	if p, err := request.DecodeCanonical(g.Phase); err == nil {
		cmd := "(the image's entrypoint and cmd)"
		if len(p.Command) > 0 {
			args := make([]string, len(p.Command))
			for i, arg := range p.Command {
				args[i] = strconv.Quote(arg) // quoted: an argument may hold spaces or controls
			}
			cmd = strings.Join(args, " ")
		}
		fmt.Fprintln(w, "command  "+cmd)
		if names := slices.Sorted(maps.Keys(p.Env)); len(names) > 0 {
			fmt.Fprintln(w, "env      "+quote.String(strings.Join(names, " "))+" (names only)")
		}
	}
	fmt.Fprintln(w, "image    "+quote.String(r.Image))
	if au := r.Authorization; au != nil {
		fmt.Fprintf(w, "minted   under authorization %s of policy %s\n", quote.String(au.Name), quote.String(au.PolicyDigest))
	}
	if pl := r.Pooled; pl != nil {
		fmt.Fprintf(w, "sandbox  pooled (prepared at %s), profile %s, sandbox %s\n",
			pl.PreparedAt.UTC().Format(time.RFC3339Nano), quote.String(pl.Profile), quote.String(pl.Sandbox))
	}
	for _, in := range r.Inputs {
		fmt.Fprintf(w, "input    %s %s from %s\n", quote.String(in.Target), quote.String(in.Digest), quote.String(in.Source))
	}
	rs := g.Resources
	fmt.Fprintf(w, "budgets  memory %s, pids %d, cpu %v, wall %v, tmp %s, output %s at %s\n",
		quantity.Bytes(rs.Memory), rs.Pids, rs.CPU, time.Duration(rs.WallTimeMillis)*time.Millisecond,
		quantity.Bytes(rs.TmpBytes), quantity.Bytes(g.Output.MaxBytes), quote.String(g.Output.Path))
	code, wall, peak := strconv.Itoa(r.Exit.Code), fmt.Sprint(time.Duration(r.Usage.WallMillis)*time.Millisecond), fmt.Sprint(quantity.Bytes(r.Usage.PeakMemoryBytes))
	for _, u := range r.Unobserved {
		switch u {
		case "exit.code":
			code = "unknown"
		case "usage.wallMillis":
			wall = "an unknown time"
		case "usage.peakMemoryBytes":
			peak = "unknown"
		}
	}
	fmt.Fprintf(w, "exit     %s code %s%s after %s, peak memory %s\n", quote.String(r.Exit.Status), code,
		signalNote(r.Exit.Signal), wall, peak)
	if len(r.Unobserved) > 0 {
		fmt.Fprintf(w, "unobserved %s\n", strings.Join(r.Unobserved, ", "))
	}
}

func backendName(r *evidence.Receipt) string {
	if r.Profile.Backend == "" {
		return string(backend.KindOCI) // v1 receipts predate the field; their backend was oci
	}
	return r.Profile.Backend
}

func signalNote(sig string) string {
	if sig == "" {
		return ""
	}
	return " signal " + quote.String(sig)
}

// printBackend prints what a v3 receipt records of the backend that ran:
// one line naming it and its identity, one with its evidence map. Older
// receipts (and unauthentic ones, which have no receipt) print nothing:
// the verifier holds each version to its own fields, so only a v3 receipt
// has an identity.
func (a *app) printBackend(r *evidence.Receipt) {
	if r == nil || r.Profile.Identity == nil {
		return
	}
	p := &r.Profile
	line := "backend " + quote.String(p.Backend)
	if id := p.Identity; id != nil {
		line += " version=" + quote.String(id.Version)
		if id.Path != "" {
			line += " path=" + quote.String(id.Path)
		}
		if id.SHA256 != "" {
			line += " sha256=" + id.SHA256
		}
	}
	fmt.Fprintln(a.stdout, line)
	ev := make([]string, 0, len(p.Evidence))
	for _, k := range slices.Sorted(maps.Keys(p.Evidence)) {
		ev = append(ev, quote.String(k)+"="+quote.String(p.Evidence[k]))
	}
	fmt.Fprintln(a.stdout, "evidence "+strings.Join(ev, " "))
	a.printKube(r.Kube)
}

// printKube prints what a v9 receipt records of the cluster a run was
// placed on: where, under what, the pod spec's digest, how the container
// ended, and what the cluster did not report.
func (a *app) printKube(k *evidence.Kube) {
	if k == nil {
		return
	}
	fmt.Fprintf(a.stdout, "cluster  %s ca-sha256=%s namespace=%s\n", quote.String(k.Cluster.Server), k.Cluster.CASHA256, quote.String(k.Namespace))
	fmt.Fprintf(a.stdout, "pod      %s uid=%s node=%s runtimeClass=%s handler=%s\n", quote.String(k.Pod.Name), quote.String(k.Pod.UID),
		quote.String(k.Node), quote.String(k.RuntimeClass), quote.String(k.Handler))
	fmt.Fprintf(a.stdout, "podspec  sha256=%s image-id=%s\n", k.PodSpecSHA256, quote.String(k.ImageID))
	c := k.Container
	fmt.Fprintf(a.stdout, "container terminated=%v exit=%d reason=%s oom-killed=%v deadline-exceeded=%v\n", c.Terminated, c.ExitCode, quote.String(c.Reason), c.OOMKilled, c.DeadlineExceeded)
	if np := k.NetworkPolicy; np != nil {
		fmt.Fprintf(a.stdout, "networkpolicy %s uid=%s enforcement=%s\n", quote.String(np.Name), quote.String(np.UID), np.Enforcement)
	}
	if len(k.Unobserved) > 0 {
		fmt.Fprintf(a.stdout, "cluster did not report %s: the receipt is unqualified\n", strings.Join(k.Unobserved, ", "))
	}
}

// verdict prints a verification result res (as JSON, or one line per
// check and the verdict) and returns its exit: verifyUnauthentic unless
// authentic, verifyAuthentic unless accepted (the verdict named accept),
// else nil.
func (a *app) verdict(res any, asJSON bool, checks []evidence.Check, what string, authentic bool, accept string, accepted bool) error {
	if asJSON {
		if err := writeJSON(a.stdout, res); err != nil {
			return err
		}
	} else {
		for _, c := range checks {
			state := "ok"
			if !c.OK {
				state = "FAIL"
			}
			fmt.Fprintf(a.stdout, "%-16s %-5s %s\n", quote.String(c.Name), state, quote.Message(c.Reason))
		}
		fmt.Fprintf(a.stdout, "authentic=%t %s=%t\n", authentic, accept, accepted)
	}
	switch {
	case !authentic:
		return &exitError{verifyUnauthentic, fmt.Errorf("%s is not authentic", what)}
	case !accepted:
		return &exitError{verifyAuthentic, fmt.Errorf("%s is authentic but not %s", what, accept)}
	}
	return nil
}

// readReceipt reads a receipt envelope file.
func readReceipt(path string) ([]byte, error) {
	env, err := readFile("receipt", path, evidence.MaxEnvelopeSize+envelopeSlack)
	if err != nil {
		return nil, err // exitRefused is verifyUnauthentic: nothing was verified
	}
	return bytes.TrimSpace(env), nil
}

// loadVerifier loads the trust file and makes its verifier.
func loadVerifier(trustPath string) (*evidence.Verifier, error) {
	trust, err := evidence.LoadTrust(trustPath)
	if err != nil {
		return nil, &exitError{verifyUnauthentic, err}
	}
	v, err := evidence.NewVerifier(trust)
	if err != nil {
		return nil, &exitError{verifyUnauthentic, err}
	}
	return v, nil
}

func (a *app) verify(ctx context.Context, env []byte, trustPath, outputs string, noOutputs bool) (*evidence.Result, []byte, error) {
	if outputs == "" && !noOutputs {
		return nil, nil, usageError("verify: --outputs DIR is required (or --no-outputs-unsafe)")
	}
	v, err := loadVerifier(trustPath)
	if err != nil {
		return nil, nil, err
	}
	opt := evidence.WithOutputs(outputs)
	if noOutputs {
		opt = evidence.WithoutOutputsUnsafe()
	}
	pol, err := evidence.NewPolicy(opt)
	if err != nil {
		return nil, nil, err
	}
	res, err := v.Verify(ctx, env, pol)
	if err != nil {
		return nil, nil, &exitError{verifyUnauthentic, err}
	}
	return res, env, nil
}

func (a *app) promoteCmd() *cobra.Command {
	var trustPath, outputs, keyPath, bundleOut string
	cmd := &cobra.Command{
		Use:   "promote RECEIPT.json --trust TRUST.yaml --outputs DIR --key VERIFIER.key [--bundle VSA.sigstore.json]",
		Short: "Verify a receipt and, only if it is promotable, print a signed SLSA VSA v1 (exits as verify does)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := readReceipt(args[0])
			if err != nil {
				return err
			}
			res, env, err := a.verify(cmd.Context(), env, trustPath, outputs, false)
			if err != nil {
				return err
			}
			if !res.Promotable {
				for _, c := range res.Failed() {
					fmt.Fprintf(a.stderr, "custody: %s: %s\n", quote.String(c.Name), quote.Message(c.Reason))
				}
				// The same exit as custody verify gives the receipt.
				if !res.OK {
					return &exitError{verifyUnauthentic, errors.New("not promoted: the receipt is not authentic")}
				}
				return &exitError{verifyAuthentic, errors.New("not promoted: the receipt is authentic but not promotable")}
			}
			if bundleOut != "" {
				if _, err := os.Lstat(bundleOut); err == nil {
					return &exitError{exitRefused, fmt.Errorf("refused: %s already exists; fix: choose a new --bundle path", quote.String(bundleOut))}
				}
			}
			dir, name := filepath.Dir(keyPath), strings.TrimSuffix(filepath.Base(keyPath), ".key")
			signer, created, err := keys.LoadOrCreate(dir, name)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(a.stderr, "custody: created verifier key %s (public key %s)\n", quote.String(keyPath), quote.String(filepath.Join(dir, name)+".pub"))
			}
			vsa, err := evidence.Promote(cmd.Context(), signer, res, env, evidence.PromoteOptions{})
			if err != nil {
				return err
			}
			if bundleOut != "" {
				b, err := evidence.Bundle(vsa, signer.ID())
				if err != nil {
					return err
				}
				if err := os.MkdirAll(filepath.Dir(bundleOut), 0o755); err != nil {
					return err
				}
				if err := writeNew(bundleOut, b); err != nil {
					return fmt.Errorf("write the VSA bundle: %w", err)
				}
				fmt.Fprintf(a.stderr, "custody: VSA bundle %s (cosign verify-blob-attestation --key %s --bundle %s --type %s --insecure-ignore-tlog OUTPUT-FILE)\n",
					quote.String(bundleOut), quote.String(filepath.Join(dir, name)+".pub"), quote.String(bundleOut), evidence.VSAPredicateType)
			}
			_, err = a.stdout.Write(append(vsa, '\n'))
			return err
		},
	}
	cmd.Flags().StringVar(&bundleOut, "bundle", "", "also write the VSA as a Sigstore bundle v0.3 here (for cosign and other Sigstore verifiers); refused if it exists")
	cmd.Flags().StringVar(&trustPath, "trust", "", "trust file")
	cmd.Flags().StringVar(&outputs, "outputs", "", "directory holding the retained outputs")
	cmd.Flags().StringVar(&keyPath, "key", "", "verifier signing key (PEM; created 0600 on first use)")
	_ = cmd.MarkFlagRequired("trust")
	_ = cmd.MarkFlagRequired("outputs")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}
