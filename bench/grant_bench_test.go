package bench_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/store"
)

// The cost of the grant checks custodyd makes before a launch, against the
// bare primitives they rest on, in one run:
//
//	BenchmarkGrantVerify         grant.Verifier.Verify of a grant as custodyd
//	                             mints it for the trivial phase
//	BenchmarkECDSAVerify         baseline: SHA-256 + ECDSA P-256 verify of the
//	                             same signature over the same DSSE PAE bytes
//	BenchmarkGrantConsume        store.DB.ConsumeGrant (bbolt, fsync'd) of a
//	                             fresh grant id
//	BenchmarkBoltPutSync         baseline: a bare bbolt Update putting one key
//	                             of the same size (fsync'd)
//	BenchmarkGrantVerifyConsume  Verify, then ConsumeGrant of its id, per op
//
// Receipt verification is measured by the driver (bench/cmd/custody-bench)
// on a real receipt from its custodyd, not here.

type fixture struct {
	issuer   *keys.Signer
	verifier *grant.Verifier
	pred     grant.Predicate
	now      time.Time
}

func newFixture(b *testing.B) *fixture {
	b.Helper()
	issuer, err := keys.Generate()
	if err != nil {
		b.Fatal(err)
	}
	runner, err := keys.Generate()
	if err != nil {
		b.Fatal(err)
	}
	v, err := grant.NewVerifier([]*keys.Verifier{issuer.Verifier()})
	if err != nil {
		b.Fatal(err)
	}
	image := "sha256:" + fmt.Sprintf("%064x", 1)
	req, err := request.Parse(fmt.Appendf(nil, bench.TrivialPhase, image))
	if err != nil {
		b.Fatal(err)
	}
	phase, err := req.Canonical()
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	entries := []grant.Input{}
	p := grant.Predicate{
		ID: grant.NewID(), Actor: "bench", Stage: "build",
		NotBefore: now, Expires: now.Add(time.Hour),
		PolicyDigest: "sha256:" + fmt.Sprintf("%064x", 2),
		Runner:       grant.Runner{ID: runner.Verifier().ID()},
		Runtime:      grant.Runtime{Version: "1.5.3", SHA256: fmt.Sprintf("%064x", 3)},
		Image:        image,
		Target:       grant.Target{OS: "linux", Arch: "amd64"},
		Inputs:       grant.Inputs{ClosureDigest: grant.ClosureDigest(entries), Entries: entries},
		Output:       grant.Output{Path: "/out", MaxBytes: bench.TrivialOutputBytes},
		Resources: grant.Resources{Memory: bench.TrivialMemory, Pids: bench.TrivialPids, CPU: bench.TrivialCPU,
			WallTimeMillis: 30000, TmpBytes: bench.TrivialTmpBytes},
		Egress:      grant.Egress{Mode: grant.EgressDeny, Destinations: []string{}},
		Credentials: []string{},
		Phase:       phase,
	}
	return &fixture{issuer: issuer, verifier: v, pred: p, now: now.Add(time.Minute)}
}

// mint mints n grants with fresh ids.
func (f *fixture) mint(b *testing.B, n int) [][]byte {
	b.Helper()
	out := make([][]byte, n)
	for i := range out {
		p := f.pred
		p.ID = grant.NewID()
		env, err := grant.Mint(context.Background(), f.issuer, p)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = env
	}
	return out
}

func openStore(b *testing.B) *store.DB {
	b.Helper()
	db, err := store.Open(filepath.Join(b.TempDir(), "custody.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func BenchmarkGrantVerify(b *testing.B) {
	f := newFixture(b)
	env := f.mint(b, 1)[0]
	ctx := context.Background()
	b.SetBytes(int64(len(env)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.verifier.Verify(ctx, env, f.now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkECDSAVerify(b *testing.B) {
	f := newFixture(b)
	env := f.mint(b, 1)[0]
	var e dsse.Envelope
	if err := json.Unmarshal(env, &e); err != nil {
		b.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		b.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	if err != nil {
		b.Fatal(err)
	}
	pae := dsse.PAE(e.PayloadType, payload)
	pub := f.issuer.Public().(*ecdsa.PublicKey)
	b.SetBytes(int64(len(env)))
	b.ReportAllocs()
	for b.Loop() {
		sum := sha256.Sum256(pae)
		if !ecdsa.VerifyASN1(pub, sum[:], sig) {
			b.Fatal("signature does not verify")
		}
	}
}

func BenchmarkGrantConsume(b *testing.B) {
	db := openStore(b)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = grant.NewID()
	}
	use := store.GrantUse{At: time.Now().UTC(), RunID: "0123456789abcdef", Actor: "bench"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := db.ConsumeGrant(ids[i], use); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBoltPutSync(b *testing.B) {
	db, err := bolt.Open(filepath.Join(b.TempDir(), "bare.db"), 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	bucket := []byte("grants")
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bucket); return err }); err != nil {
		b.Fatal(err)
	}
	val, _ := json.Marshal(store.GrantUse{At: time.Now().UTC(), RunID: "0123456789abcdef", Actor: "bench"})
	ids := make([][]byte, b.N)
	for i := range ids {
		ids[i] = []byte(grant.NewID())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(ids[i], val) }); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGrantVerifyConsume(b *testing.B) {
	f := newFixture(b)
	db := openStore(b)
	envs := f.mint(b, b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, err := f.verifier.Verify(ctx, envs[i], f.now)
		if err != nil {
			b.Fatal(err)
		}
		use := store.GrantUse{At: f.now, RunID: "0123456789abcdef", Actor: g.Predicate.Actor}
		if err := db.ConsumeGrant(g.Predicate.ID, use); err != nil {
			b.Fatal(err)
		}
	}
}
