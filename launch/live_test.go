package launch

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/store"
)

// TestUnspentGrantBindsForItsWholeLife: an unspent grant keeps its image
// from removal past its expiry for as long as a launch it begins may last
// (the longer of its own wall time and the policy's ceiling, plus the
// spend grace), not just the grace; after that, or once revoked, it binds
// nothing.
func TestUnspentGrantBindsForItsWholeLife(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "custody.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	expires := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pol := &policy.Policy{Ceilings: policy.Ceilings{WallTime: quantity.Duration(time.Hour)}}
	now := expires
	l := &Launcher{cfg: Config{Store: db, Now: func() time.Time { return now },
		Policy: func() (*policy.Policy, string, error) { return pol, "sha256:test", nil }}}
	put := func(id string, g issued) {
		v, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(store.Issued, func(b *bolt.Bucket) error { return b.Put([]byte(id), v) }); err != nil {
			t.Fatal(err)
		}
	}
	const img = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	put("short", issued{Image: img, Expires: expires, WallTime: 10 * time.Minute})
	put("long", issued{Image: img, Expires: expires, WallTime: 3 * time.Hour})
	put("revoked", issued{Image: img, Expires: expires, WallTime: 3 * time.Hour})
	put("other", issued{Image: "sha256:2222222222222222222222222222222222222222222222222222222222222222", Expires: expires})
	if err := db.Revoke("revoked", store.Revocation{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		after time.Duration
		want  []string
	}{
		{-time.Second, []string{"long", "short"}},
		// One minute's grace alone would have freed the image here.
		{2 * time.Minute, []string{"long", "short"}},
		// The policy's ceiling (1h) bounds the short grant's launch.
		{time.Hour + time.Minute - time.Second, []string{"long", "short"}},
		{time.Hour + time.Minute, []string{"long"}},
		// The long grant keeps its own 3h bound.
		{3*time.Hour + time.Minute - time.Second, []string{"long"}},
		{3*time.Hour + time.Minute, nil},
	} {
		now = expires.Add(c.after)
		live, err := l.LiveGrants(img)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, g := range live {
			id, why, _ := strings.Cut(g, " ")
			ids = append(ids, id)
			if !strings.Contains(why, "unspent") {
				t.Errorf("%s past expiry: %q does not say why it binds", c.after, g)
			}
		}
		if strings.Join(ids, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s past expiry: live %v, want %v", c.after, live, c.want)
		}
	}
}

// TestLiveGrantsWithoutAPolicy: with no valid policy loaded image removal
// still gets an answer: a grant binds by the wall time it recorded, and
// one that recorded none binds until a policy is loaded again.
func TestLiveGrantsWithoutAPolicy(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "custody.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	expires := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := expires.Add(time.Hour)
	l := &Launcher{cfg: Config{Store: db, Now: func() time.Time { return now },
		Policy: func() (*policy.Policy, string, error) { return nil, "", ErrNoPolicy }}}
	const img = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	for id, g := range map[string]issued{
		"recorded": {Image: img, Expires: expires, WallTime: 10 * time.Minute}, // ended 49 min ago
		"unknown":  {Image: img, Expires: expires},
	} {
		v, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(store.Issued, func(b *bolt.Bucket) error { return b.Put([]byte(id), v) }); err != nil {
			t.Fatal(err)
		}
	}
	live, err := l.LiveGrants(img)
	if err != nil {
		t.Fatalf("LiveGrants without a policy: %v", err)
	}
	if len(live) != 1 || !strings.HasPrefix(live[0], "unknown ") {
		t.Fatalf("live %v, want only the grant whose launch time is unknown", live)
	}
}
