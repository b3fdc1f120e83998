package launch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/quantity"
)

// TestRedeemSpendsAGrantOnce: a valid grant is redeemed, spent by exactly
// one run and launched; redeemed again it is refused as replayed, and the
// refusal opens no attempt and makes nothing.
func TestRedeemSpendsAGrantOnce(t *testing.T) {
	rg := newFakeRig(t)
	env := rg.issue()
	id := rg.grantID(env)
	r := rg.redeem(env)
	use, err := rg.db.GrantUsed(id)
	if err != nil || use.RunID != r.ID() || use.Actor != rigActor {
		t.Fatalf("the redeemed grant's use: %+v (%v); want it spent by run %s", use, err, r.ID())
	}
	if a := rg.attempt(r.ID()); a.State != journal.Running || a.GrantID != id || len(a.Outstanding()) == 0 {
		t.Fatalf("the spend's attempt: %+v; want it open with the backend's intents", a)
	}
	o, out := rg.execute(r)
	if o.Err != nil || o.Result.Status != host.StatusOK || o.Receipt == nil {
		t.Fatalf("the launch: %v, %+v, receipt %v (%s)\n%s", o.Err, o.Result, o.Receipt != nil, rg.record(r.ID()).ReceiptError, out)
	}

	_, err = rg.l.Redeem(context.Background(), env, submitter)
	wantCode(t, err, grant.CodeReplayed)
	if all, _ := rg.h.Attempts(); len(all) != 1 {
		t.Fatalf("a replay opened an attempt: %+v", all)
	}
	if left := rg.fake.Foreign(func(string, string) bool { return false }); len(left) != 0 {
		t.Fatalf("a replay made %+v", left)
	}
	// The spend refuses a replay on its own, in its transaction: a grant
	// found unspent by the early check and spent since is still refused.
	_, err = rg.l.spend(context.Background(), r.Grant(), r.prep.Plan, env, nil)
	wantCode(t, err, grant.CodeReplayed)
	if all, _ := rg.h.Attempts(); len(all) != 1 {
		t.Fatalf("a replayed spend opened an attempt: %+v", all)
	}
}

// TestRedeemRefusesBeforeAnySpend: a grant whose envelope was tampered
// with, one that has expired, one submitted by a peer that may not submit
// as its actor, and one whose re-derived values differ from what it binds
// (the inputs changed, the policy changed) are each refused with its own
// code before the grant is spent, an attempt opened or anything made; the
// same grant, with the world put back, is then spent.
func TestRedeemRefusesBeforeAnySpend(t *testing.T) {
	rg := newFakeRig(t)
	env := rg.issue()
	id := rg.grantID(env)
	ctx := context.Background()

	t.Run("tampered", func(t *testing.T) {
		tampered := []byte(strings.Replace(string(env), `"payload":"`, `"payload":"eyJ`, 1))
		_, err := rg.l.Redeem(ctx, tampered, submitter)
		if err == nil {
			t.Fatal("a tampered envelope was redeemed")
		}
		rg.nothingSpent(id)
	})
	t.Run("expired", func(t *testing.T) {
		defer func(now time.Time) { rg.now = now }(rg.now)
		rg.now = rg.now.Add(11 * time.Minute)
		_, err := rg.l.Redeem(ctx, env, submitter)
		wantCode(t, err, grant.CodeExpired)
		rg.nothingSpent(id)
	})
	t.Run("wrong submitter", func(t *testing.T) {
		_, err := rg.l.Redeem(ctx, env, Peer{UID: 1, GID: 1, Known: true})
		wantCode(t, err, grant.CodeSubmitterNotAllowed)
		rg.nothingSpent(id)
	})
	t.Run("inputs changed", func(t *testing.T) {
		path := filepath.Join(rg.inputs, "data.txt")
		if err := os.WriteFile(path, []byte("changed after issue\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(path, []byte("original\n"), 0o644)
		_, err := rg.l.Redeem(ctx, env, submitter)
		wantCode(t, err, grant.CodeInputsChanged)
		rg.nothingSpent(id)
	})
	t.Run("policy changed", func(t *testing.T) {
		defer func(d string) { rg.polDig = d }(rg.polDig)
		rg.polDig = "sha256:" + strings.Repeat("b", 64)
		_, err := rg.l.Redeem(ctx, env, submitter)
		wantCode(t, err, grant.CodePolicyChanged)
		rg.nothingSpent(id)
	})
	t.Run("resources changed", func(t *testing.T) {
		// The policy's default changes what admission gives the phase.
		defer func(d quantity.Bytes) { rg.pol.Defaults.TmpBytes = d }(rg.pol.Defaults.TmpBytes)
		rg.pol.Defaults.TmpBytes = 16 << 20
		_, err := rg.l.Redeem(ctx, env, submitter)
		wantCode(t, err, grant.CodeNotAdmitted)
		if !strings.Contains(err.Error(), "resources.tmpBytes") {
			t.Errorf("the refusal does not name the field: %v", err)
		}
		rg.nothingSpent(id)
	})
	// The legitimate case: unchanged, the grant is spent.
	r := rg.redeem(env)
	if o, out := rg.execute(r); o.Err != nil || o.Result.Status != host.StatusOK {
		t.Fatalf("the grant, unchanged: %v %+v\n%s", o.Err, o.Result, out)
	}
}
