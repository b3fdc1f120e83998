package docker

import (
	"testing"
	"time"
)

// TestProfileKeptPerDaemonIdentity: a second Profile call uses the kept
// profile (no second probe); a changed identity (a daemon restarted, here
// stood in for by the hook) forces a re-probe; a profile whose egress proof
// could not measure (its image absent) is never kept.
func TestProfileKeptPerDaemonIdentity(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	probes := 0
	restarted := false
	var seen engineKey
	p := NewPacks(d, ProbeOptions{Image: dt.Image})
	p.probed = func() { probes++ }
	p.keyed = func(k *engineKey) {
		if restarted {
			k.PeerStart += "-restarted"
		}
		seen = *k
	}
	profile := func(want int, what string) {
		t.Helper()
		e, err := p.Profile(ctx, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if probes != want {
			t.Fatalf("%s: %d probes, want %d", what, probes, want)
		}
		if !e.InternalBlocksEgress {
			t.Fatalf("%s: egress not proved blocked: %v", what, e.Notes)
		}
	}
	profile(1, "first call")
	if seen.PeerPid == 0 || seen.PeerStart == "" || seen.ID == "" || seen.SecurityOptions == "" {
		t.Fatalf("identity not fully read from the isolated daemon: %+v", seen)
	}
	start := time.Now()
	profile(1, "second call, same daemon")
	t.Logf("a kept profile costs %v (identity read fresh)", time.Since(start))
	restarted = true
	profile(2, "after the daemon's identity changed")
	profile(2, "again, same new identity")

	// Refusal beside it: a proof that could not measure is not kept.
	bad := NewPacks(d, ProbeOptions{Image: "custody-absent:none"})
	badProbes := 0
	bad.probed = func() { badProbes++ }
	for i := 1; i <= 2; i++ {
		e, err := bad.Profile(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e.InternalBlocksEgress {
			t.Fatal("egress proved with an absent image")
		}
		if badProbes != i {
			t.Fatalf("call %d: %d probes: an unsettled proof was kept", i, badProbes)
		}
	}
}
