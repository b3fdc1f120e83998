package launch

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
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
	if o.Err != nil || o.Result.Status != runrecord.StatusOK || o.Receipt == nil {
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
	// A replay is answered as one, before anything is re-derived: not
	// as whatever else changed since.
	path := filepath.Join(rg.inputs, "data.txt")
	if err := os.WriteFile(path, []byte("changed after the spend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = rg.l.Redeem(context.Background(), env, submitter)
	wantCode(t, err, grant.CodeReplayed)
	// The spend refuses a replay on its own, in its transaction: a grant
	// found unspent by the early check and spent since is still refused.
	_, err = rg.l.spend(context.Background(), r.Grant(), r.prep.Plan, env, nil, nil, nil, nil)
	wantCode(t, err, grant.CodeReplayed)
	if all, _ := rg.h.Attempts(); len(all) != 1 {
		t.Fatalf("a replayed spend opened an attempt: %+v", all)
	}
}

// TestRedeemRefusesBeforeAnySpend: a grant whose envelope was tampered
// with, one that has expired, one submitted by a peer that may not submit
// as its actor, and one whose re-derived values differ from what it binds
// (the inputs, the policy or what admission gives changed), and a revoked
// one, are each refused with its own
// code before the grant is spent, an attempt opened or anything made; the
// same grant, with the world put back, is then spent.
func TestRedeemRefusesBeforeAnySpend(t *testing.T) {
	rg := newFakeRig(t)
	env := rg.issue()
	id := rg.grantID(env)
	ctx := context.Background()

	t.Run("tampered", func(t *testing.T) {
		// The grant's expiry moved a day later, under its signature, and
		// submitted after the signed expiry: only the signature tells.
		defer func(now time.Time) { rg.now = now }(rg.now)
		rg.now = rg.now.Add(11 * time.Minute)
		_, err := rg.l.Redeem(ctx, extended(t, env, 24*time.Hour), submitter)
		wantCode(t, err, grant.CodeTampered)
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
	t.Run("revoked", func(t *testing.T) {
		other := rg.issue()
		oid := rg.grantID(other)
		if err := rg.db.Revoke(oid, store.Revocation{}); err != nil {
			t.Fatal(err)
		}
		_, err := rg.l.Redeem(ctx, other, submitter)
		wantCode(t, err, grant.CodeRevoked)
		rg.nothingSpent(oid)
	})
	// The legitimate case: unchanged, the grant is spent.
	r := rg.redeem(env)
	if o, out := rg.execute(r); o.Err != nil || o.Result.Status != runrecord.StatusOK {
		t.Fatalf("the grant, unchanged: %v %+v\n%s", o.Err, o.Result, out)
	}
}

// extended is env with its predicate's expiry moved by d, its signature
// left as it was (the payload otherwise byte for byte as signed).
func extended(t *testing.T, env []byte, d time.Duration) []byte {
	t.Helper()
	var e map[string]json.RawMessage
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	var b64 string
	if err := json.Unmarshal(e["payload"], &b64); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Predicate struct {
			Expires time.Time `json:"expires"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	was := `"expires":"` + st.Predicate.Expires.UTC().Format(time.RFC3339) + `"`
	if !bytes.Contains(payload, []byte(was)) {
		t.Fatalf("no %s in the payload %s", was, payload)
	}
	payload = bytes.Replace(payload, []byte(was), []byte(`"expires":"`+st.Predicate.Expires.Add(d).UTC().Format(time.RFC3339)+`"`), 1)
	if e["payload"], err = json.Marshal(base64.StdEncoding.EncodeToString(payload)); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
