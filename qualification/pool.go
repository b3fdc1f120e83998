package qualification

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/conformance"
)

// poolSize is how many sandboxes each pooled qualification profile keeps:
// the suite runs its checks one after another, and the pool refills while
// a check is judged.
const poolSize = 2

// poolPolicy is the pool section of a pooled qualification's policy: one
// profile per budget set of conformance.PooledBudgets.
func poolPolicy(image, tier string) string {
	var b strings.Builder
	b.WriteString("pool:\n")
	for i, bg := range conformance.PooledBudgets {
		fmt.Fprintf(&b, `  - name: qualify-%d
    image: %q
    tier: %s
    size: %d
    idleTTL: 30m
    resources: {memory: %d, pids: %d, cpu: %s, tmpBytes: %d, outputPath: /out, outputBytes: %d}
`, i, image, tier, poolSize, bg.Memory, bg.Pids, strconv.FormatFloat(bg.CPU, 'g', -1, 64), bg.TmpBytes, bg.OutputBytes)
	}
	return b.String()
}

// waitPool waits until the runner's runtime directory holds every pooled
// sandbox (one launch dir each), so that no check's run finds the pool
// still filling: the suite runs faster than a loaded host refills it, and
// a run that finds it empty would be launched cold and fail its check.
func waitPool(ctx context.Context, runtimeDir string) error {
	want := poolSize * len(conformance.PooledBudgets)
	deadline := time.Now().Add(time.Minute)
	for {
		ents, _ := os.ReadDir(runtimeDir)
		if len(ents) >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool holds %d of %d sandboxes after a minute", len(ents), want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
