package qualification

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/matrix"
)

// MeasureRequest is what an operator asks a runner to qualify: which
// suite to run on what, never a verdict. The runner runs the suite itself,
// judges every check from its own observations and signs only that.
type MeasureRequest struct {
	// Tier is production or development.
	Tier string `json:"tier"`
	// Backend is the backend to qualify; "" is the default one.
	Backend string `json:"backend,omitempty"`
	// Image is the digest of the conformance image in the runner's store.
	Image string `json:"image"`
	// Scratch is a directory under the policy's inputRoots for the suite's
	// inputs and fetched outputs.
	Scratch string `json:"scratch"`
	// AmbientVar names a variable set in the runner's own environment that
	// no phase may see.
	AmbientVar string `json:"ambientVar,omitempty"`
	// Parallel is how many checks run at once.
	Parallel int `json:"parallel,omitempty"`
	// Only limits the suite to checks named FAMILY or FAMILY/NAME; the row
	// lists every other check as not run, failed.
	Only []string `json:"only,omitempty"`
	// Pooled runs the suite on pooled launches (conformance.Env.Pooled).
	Pooled bool `json:"pooled,omitempty"`
	// Egress is the restricted-egress target, if the policy grants one.
	Egress *conformance.EgressTarget `json:"egress,omitempty"`
}

// Measurement is a runner's answer: the row it signed and the suite's
// report it built the row from.
type Measurement struct {
	Row    matrix.Row         `json:"row"`
	Report conformance.Report `json:"report"`
}

var imageDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Sockets are the runner's own sockets, which the suite drives as a
// client does.
type Sockets struct {
	Control, Submit *api.Client
	// RuntimeDir is the runner's runtime directory (a launch dir per
	// pooled sandbox): a pooled suite waits there for its pool.
	RuntimeDir string
}

// Measure runs the conformance suite in this process, against the runner's
// own sockets, and signs the row its verdicts make. It fails with
// ErrQuarantined, ErrRefused or ErrBadRequest before anything runs.
func (a *Attester) Measure(ctx context.Context, req MeasureRequest, socks Sockets, logf func(format string, args ...any)) (*Measurement, *matrix.Qualification, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := a.notQuarantined(); err != nil {
		return nil, nil, err
	}
	if req.Tier != conformance.TierProduction && req.Tier != conformance.TierDevelopment {
		return nil, nil, &classed{class: ErrBadRequest, err: fmt.Errorf("tier %q: want production or development", req.Tier)}
	}
	if !imageDigest.MatchString(req.Image) {
		return nil, nil, &classed{class: ErrBadRequest, err: fmt.Errorf("image %q: want the conformance image's digest, sha256:<64 hex>", req.Image)}
	}
	if fi, err := os.Stat(req.Scratch); !filepath.IsAbs(req.Scratch) || err != nil || !fi.IsDir() {
		return nil, nil, &classed{class: ErrBadRequest, err: fmt.Errorf("scratch %q: want an absolute path to an existing directory under the policy's inputRoots", req.Scratch)}
	}
	if req.Backend != "" && req.Backend != a.Backend {
		return nil, nil, refuse("the request is for backend %q but this runner qualifies %q", req.Backend, a.Backend)
	}
	if _, err := a.platform(); err != nil {
		return nil, nil, err
	}
	env := conformance.Env{
		Control: socks.Control, Submit: socks.Submit, Image: req.Image, Scratch: req.Scratch, Tier: req.Tier,
		Backend: suiteBackend(a.Backend), AmbientVar: req.AmbientVar, Parallel: req.Parallel, Egress: req.Egress, Pooled: req.Pooled,
		Progress: func(c conformance.Check) {
			state := "pass"
			if !c.Passed {
				state = "FAIL"
			}
			logf("%-4s %s/%s (%d ms)", state, c.Family, c.Name, c.Millis)
		},
	}
	if req.Pooled {
		env.BeforeRun = func(ctx context.Context) error { return waitPool(ctx, socks.RuntimeDir) }
		if err := waitPool(ctx, socks.RuntimeDir); err != nil {
			return nil, nil, err
		}
	}
	if len(req.Only) > 0 {
		only := req.Only
		env.Only = func(family, name string) bool {
			for _, s := range only {
				if s == family || s == family+"/"+name {
					return true
				}
			}
			return false
		}
	}
	rep := conformance.Run(ctx, env)
	rep.Checks = append(rep.Checks, conformance.LeftOut(env)...)
	row, q, err := a.attest(ctx, SignRequestOf(rep), &matrix.Measured{
		By: matrix.MeasuredByRunner, Image: req.Image,
		Started: rep.Started.Truncate(time.Second), Finished: rep.Finished.Truncate(time.Second),
	})
	if err != nil {
		return nil, nil, err
	}
	return &Measurement{Row: *row, Report: rep}, q, nil
}
