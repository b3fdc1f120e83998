package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
)

// ReceiptRate is how fast a real receipt verifies.
type ReceiptRate struct {
	// Sequential is receipts/s on one goroutine; Parallel on Workers.
	Sequential, Parallel float64
	Workers              int
	// OutputsChecked says the retained output tree was re-hashed and
	// compared each time (evidence.WithOutputs).
	OutputsChecked bool
	N              int
}

// MeasureReceipts verifies rcpt (signed by a custodyd whose grant issuer
// key is issuerPEM) with evidence.Verifier for about d sequentially and d
// on workers goroutines. Every verification must come out OK.
func MeasureReceipts(ctx context.Context, rcpt *api.Receipt, res *api.Result, issuerPEM []byte, workers int, d time.Duration) (*ReceiptRate, error) {
	rv, err := NewReceiptVerifier(rcpt, issuerPEM)
	if err != nil {
		return nil, err
	}
	check, checked, err := rv.For(res)
	if err != nil {
		return nil, err
	}
	verify := func() error {
		_, err := check(ctx, rcpt)
		return err
	}
	if err := verify(); err != nil {
		return nil, err
	}
	rate := &ReceiptRate{Workers: workers, OutputsChecked: checked}
	// Sequential.
	n, start := 0, time.Now()
	for time.Since(start) < d || n < 50 {
		if err := verify(); err != nil {
			return nil, err
		}
		n++
	}
	rate.Sequential = float64(n) / time.Since(start).Seconds()
	rate.N = n
	// Parallel.
	var total atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	start = time.Now()
	for range workers {
		wg.Go(func() {
			for time.Since(start) < d {
				if err := verify(); err != nil {
					once.Do(func() { first = err })
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if total.Load() == 0 {
		return nil, errors.New("no receipt verified in parallel")
	}
	rate.Parallel = float64(total.Load()) / time.Since(start).Seconds()
	return rate, nil
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n") {
		b.WriteString(pad + line)
	}
	return b.String() + "\n"
}

// ReceiptVerifier verifies receipts of one custodyd with evidence.Verifier,
// trusting that custodyd's runner key (as a receipt carries it) and its
// grant issuer key.
type ReceiptVerifier struct {
	v *evidence.Verifier
}

// NewReceiptVerifier trusts the runner key rcpt carries and the issuer key
// issuerPEM, for the production and development tiers.
func NewReceiptVerifier(rcpt *api.Receipt, issuerPEM []byte) (*ReceiptVerifier, error) {
	trust := fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Trust\nrunners:\n  - name: bench-runner\n    publicKeyPEM: |\n%s"+
		"issuers:\n  - name: bench-issuer\n    publicKeyPEM: |\n%stiers: [production, development]\n",
		indent(rcpt.RunnerPublicKey, 6), indent(string(issuerPEM), 6))
	dir, err := os.MkdirTemp("", "custody-bench-trust-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tr, err := evidence.ParseTrust([]byte(trust), dir)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	v, err := evidence.NewVerifier(tr)
	if err != nil {
		return nil, err
	}
	return &ReceiptVerifier{v: v}, nil
}

// For returns the check of a receipt of the run res: the signature, the
// embedded grant, the bindings and, where the run's retained output tree
// is on this host (outputsChecked), that tree re-hashed against the
// receipt. Anything short of OK is an error naming each failed check; OK
// returns the verified predicate.
func (rv *ReceiptVerifier) For(res *api.Result) (check func(context.Context, *api.Receipt) (*evidence.Receipt, error), outputsChecked bool, err error) {
	out := evidence.WithoutOutputsUnsafe()
	if res != nil && res.Output != nil && res.Output.Path != "" {
		if _, err := os.Stat(res.Output.Path); err == nil {
			out, outputsChecked = evidence.WithOutputs(res.Output.Path), true
		}
	}
	pol, err := evidence.NewPolicy(out)
	if err != nil {
		return nil, false, err
	}
	return func(ctx context.Context, rcpt *api.Receipt) (*evidence.Receipt, error) {
		if rcpt == nil {
			return nil, errors.New("no receipt with the result")
		}
		r, err := rv.v.Verify(ctx, rcpt.Envelope, pol)
		if err != nil {
			return nil, err
		}
		if !r.OK {
			var failed []string
			for _, c := range r.Failed() {
				failed = append(failed, c.Name+": "+c.Reason)
			}
			return nil, fmt.Errorf("receipt does not verify: %s", strings.Join(failed, "; "))
		}
		return r.Receipt, nil
	}, outputsChecked, nil
}
