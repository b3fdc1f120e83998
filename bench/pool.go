package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// poolSection is a pool profile matching TrivialPhase exactly, appended to
// the bench policy by EnablePool.
const poolSection = `pool:
  - name: bench
    image: %q
    tier: development
    size: %d
    idleTTL: 1h
    resources: {memory: 64Mi, pids: 64, cpu: 1, tmpBytes: 16Mi, outputPath: /out, outputBytes: 32Mi}
`

// EnablePool rewrites the bench policy with a warm pool of size sandboxes
// for TrivialPhase, reloads it and waits until the pool is full.
func (d *Daemon) EnablePool(ctx context.Context, size int) error {
	pol := fmt.Sprintf(policyYAML, d.Image, filepath.Join(d.Dir, "work")) + fmt.Sprintf(poolSection, d.Image, size)
	if err := os.WriteFile(filepath.Join(d.Dir, "policy.yaml"), []byte(pol), 0o600); err != nil {
		return err
	}
	st, err := d.Control.ReloadPolicy(ctx)
	if err != nil {
		return fmt.Errorf("policy reload: %w", err)
	}
	if st.Error != "" {
		return fmt.Errorf("policy reload: %s", st.Error)
	}
	return d.WaitPool(ctx, size)
}

// WaitPool waits until n sandboxes are held (n launch dirs and no run in
// flight), within 30 seconds.
func (d *Daemon) WaitPool(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, err := os.ReadDir(filepath.Join(d.Dir, "run"))
		if err == nil && len(ents) == n {
			// The last member's gate reports ready shortly after its dir
			// exists; a member not yet ready is not taken.
			time.Sleep(20 * time.Millisecond)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pool holds %d sandboxes after 30s, want %d", len(ents), n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
