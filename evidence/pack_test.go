package evidence_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/grant/granttest"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// packCompose is the compose file of the fixture's pack.
const packCompose = "name: range\nservices:\n  web:\n    image: web\n    ports: [\"80\"]\n  db:\n    image: db\n"

// packPlan stands in for the admitted plan's canonical JSON.
const packPlan = `{"project":"range","services":[{"name":"db"},{"name":"web","ports":[{"container":"80/tcp","hostIp":"127.0.0.1","hostPort":49153}]}]}`

func hexID(c string) string { return strings.Repeat(c, 64) }

func packGrantPredicate(runner string) grant.PackPredicate {
	return granttest.PackPredicate(runner, notBefore, expires, packCompose, packPlan)
}

// packUp returns an up receipt of the grant genv (predicate gp) by runner.
func packUp(runner, issuer *keys.Signer, gp grant.PackPredicate, genv []byte) evidence.PackReceipt {
	return evidence.PackReceipt{
		Operation: evidence.PackUp,
		Runner:    evidence.Identity{ID: runner.ID()},
		Grant: evidence.GrantRef{ID: gp.ID, EnvelopeSHA256: hexOf(genv), IssuerID: issuer.ID(),
			Envelope: json.RawMessage(genv)},
		Workspace:  "3f1d0c9a6b2e4d5f8a7c6b5a4d3e2f10",
		Attempt:    "a1",
		Pack:       evidence.PackRef{Project: "range", Digest: digestOf(packCompose)},
		PlanDigest: digestOf(packPlan),
		Engine:     evidence.Engine{Name: "docker", Version: "26.1.5", APIVersion: "1.45"},
		Containers: []evidence.PackContainer{
			{Service: "db", ID: hexID("1"), Name: "range-db-3f1d0c9a", ImageID: digestOf("db image"),
				HostConfigSHA256: hexOf([]byte(`{"NetworkMode":"range-net"}`)),
				HostConfig: evidence.PackHostConfig{CapDrop: []string{"ALL"}, NetworkMode: "range-net", IpcMode: "private",
					Mounts:      []evidence.PackMount{{Type: "volume", Source: "range-data-3f1d0c9a", Target: "/var/lib/db"}, {Type: "tmpfs", Target: "/tmp"}},
					SecurityOpt: []string{"no-new-privileges"}, MemoryBytes: 256 << 20, NanoCPUs: 500000000, PidsLimit: 128}},
			{Service: "web", ID: hexID("2"), Name: "range-web-3f1d0c9a", ImageID: digestOf("web image"),
				HostConfigSHA256: hexOf([]byte(`{"NetworkMode":"range-net","PortBindings":{}}`)),
				HostConfig: evidence.PackHostConfig{CapAdd: []string{"NET_BIND_SERVICE"}, CapDrop: []string{"ALL"}, NetworkMode: "range-net",
					PortBindings:   []evidence.PackPort{{ContainerPort: "80/tcp", HostIP: "127.0.0.1", HostPort: 49153}},
					ReadonlyRootfs: true, SecurityOpt: []string{"no-new-privileges"}, PidsLimit: 64}},
		},
		Networks: []evidence.PackNetwork{{Name: "range-net-3f1d0c9a", ID: hexID("a"), Internal: true}},
		Volumes:  []evidence.PackVolume{{Name: "range-data-3f1d0c9a"}},
		Choices: []evidence.PackChoice{
			{Kind: "host-port", Subject: "web 80/tcp", Value: "127.0.0.1:49153"},
			{Kind: "subnet", Subject: "range-net", Value: "172.30.5.0/24"},
		},
		Started:  started,
		Finished: finished,
	}
}

// packDown returns the down receipt of the workspace packUp realized.
func packDown(up evidence.PackReceipt) evidence.PackReceipt {
	d := up
	d.Operation, d.Attempt = evidence.PackDown, "d1"
	d.Containers, d.Networks, d.Volumes, d.Choices = nil, nil, nil, nil
	d.Cleanup = &evidence.PackCleanup{Verified: true, Resources: []evidence.PackCleanupResource{
		{Kind: evidence.KindContainer, ID: hexID("1"), Name: "range-db-3f1d0c9a", Result: evidence.CleanupGone},
		{Kind: evidence.KindContainer, ID: hexID("2"), Name: "range-web-3f1d0c9a", Result: evidence.CleanupGone},
		{Kind: evidence.KindNetwork, ID: hexID("a"), Name: "range-net-3f1d0c9a", Result: evidence.CleanupGone},
		{Kind: evidence.KindVolume, ID: "range-data-3f1d0c9a", Name: "range-data-3f1d0c9a", Result: evidence.CleanupKept, Reason: "down without --volumes"},
	}}
	// Long after the grant expired: teardown is never bound by it.
	d.Started, d.Finished = expires.Add(30*time.Minute), expires.Add(31*time.Minute)
	return d
}

type packFixture struct {
	runner, issuer *keys.Signer
	grantPred      grant.PackPredicate
	grantEnv       []byte
	up, down       evidence.PackReceipt
	upEnv, downEnv []byte
}

func newPackFixture(t testing.TB) *packFixture {
	t.Helper()
	f := &packFixture{runner: newKey(t), issuer: newKey(t)}
	f.grantPred = packGrantPredicate(f.runner.ID())
	var err error
	if f.grantEnv, err = grant.MintPack(context.Background(), f.issuer, f.grantPred); err != nil {
		t.Fatal(err)
	}
	f.up = packUp(f.runner, f.issuer, f.grantPred, f.grantEnv)
	f.down = packDown(f.up)
	f.upEnv, f.downEnv = signPack(t, f.runner, f.up), signPack(t, f.runner, f.down)
	return f
}

func signPack(t testing.TB, runner *keys.Signer, r evidence.PackReceipt) []byte {
	t.Helper()
	env, err := evidence.SignPackReceipt(context.Background(), runner, r)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func (f *packFixture) trust(t testing.TB, top string) *evidence.Trust {
	t.Helper()
	return parseTrust(t, trustYAML(f.runner, f.issuer, "", top))
}

func verifyPack(t testing.TB, tr *evidence.Trust, env, compose []byte, opts ...evidence.PolicyOption) *evidence.PackResult {
	t.Helper()
	res, err := newVerifier(t, tr).VerifyPack(context.Background(), env, packPolicy(t, compose, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// packPolicy is the policy that checks compose (none when nil) as of
// verifyNow, with opts.
func packPolicy(t testing.TB, compose []byte, opts ...evidence.PolicyOption) evidence.PackPolicy {
	t.Helper()
	c := evidence.WithoutCompose()
	if compose != nil {
		c = evidence.WithCompose(compose)
	}
	p, err := evidence.NewPackPolicy(c, append([]evidence.PolicyOption{evidence.WithNow(verifyNow)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var packChecks = []string{"envelope", "signature", "issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}

// wantPackFailed fails unless exactly the named checks failed, one of them
// with a reason holding want.
func wantPackFailed(t testing.TB, res *evidence.PackResult, want string, names ...string) {
	t.Helper()
	var failed, got []string
	for _, c := range res.Checks {
		got = append(got, c.Name)
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	if strings.Join(got, ",") != strings.Join(packChecks, ",") {
		t.Fatalf("checks %v, want %v", got, packChecks)
	}
	if strings.Join(failed, ",") != strings.Join(names, ",") {
		t.Fatalf("failed checks %v, want %v:\n%s", failed, names, describePack(res))
	}
	if len(names) > 0 && !strings.Contains(describePack(res), want) {
		t.Fatalf("no failed check says %q:\n%s", want, describePack(res))
	}
}

func describePack(res *evidence.PackResult) string {
	var b strings.Builder
	for _, c := range res.Checks {
		b.WriteString("  " + c.Name + " ")
		if c.OK {
			b.WriteString("ok ")
		} else {
			b.WriteString("FAIL ")
		}
		b.WriteString(c.Reason + "\n")
	}
	return b.String()
}

func TestPackReceiptRoundTrip(t *testing.T) {
	f := newPackFixture(t)
	tr := f.trust(t, "")
	for name, env := range map[string][]byte{"up": f.upEnv, "down": f.downEnv} {
		t.Run(name, func(t *testing.T) {
			res := verifyPack(t, tr, env, []byte(packCompose))
			if !res.OK || !res.Acceptable || !res.ComposeChecked {
				t.Fatalf("genuine %s receipt:\n%s", name, describePack(res))
			}
			wantPackFailed(t, res, "")
			if res.SignerID != f.runner.ID() || res.Receipt == nil || res.Receipt.Operation != name {
				t.Fatalf("signer %s receipt %+v", res.SignerID, res.Receipt)
			}
			want := []evidence.Subject{
				{Name: "compose/range", Digest: map[string]string{"sha256": digestOf(packCompose)[7:]}},
				{Name: "plan/range", Digest: map[string]string{"sha256": digestOf(packPlan)[7:]}},
			}
			got, _ := json.Marshal(res.Subjects)
			wantJSON, _ := json.Marshal(want)
			if !bytes.Equal(got, wantJSON) {
				t.Fatalf("subjects %s, want %s", got, wantJSON)
			}
			payload := payloadOf(t, env)
			if !bytes.Contains(payload, []byte(`"predicateType":"`+predicate.PackReceipt+`"`)) {
				t.Fatalf("statement type:\n%s", payload)
			}
			if err := evidence.PackDecodePathsAgree(payload); err != nil {
				t.Fatal(err)
			}
			if !evidence.IsPackReceipt(env) {
				t.Fatal("IsPackReceipt = false")
			}
		})
	}
	// Without a compose file the receipt is authentic; the compose check
	// says it was not evaluated.
	res := verifyPack(t, tr, f.upEnv, nil)
	if !res.OK || res.ComposeChecked {
		t.Fatalf("without compose:\n%s", describePack(res))
	}
	wantPackFailed(t, res, "not evaluated", "compose")
	// Another compose file is not the one the receipt vouches for.
	res = verifyPack(t, tr, f.upEnv, []byte(packCompose+"  x:\n    image: x\n"))
	if res.OK {
		t.Fatalf("another compose file accepted:\n%s", describePack(res))
	}
	wantPackFailed(t, res, "pack.digest", "compose")
}

// TestPackReceiptRefusals: each tampering fails its check (the check name
// is the typed reason), beside the genuine receipt that passes them all.
func TestPackReceiptRefusals(t *testing.T) {
	f := newPackFixture(t)
	tr := f.trust(t, "")
	compose := []byte(packCompose)
	wantPackFailed(t, verifyPack(t, tr, f.upEnv, compose), "")
	payload := payloadOf(t, f.upEnv)
	resign := func(old, new string) []byte {
		t.Helper()
		if !bytes.Contains(payload, []byte(old)) {
			t.Fatalf("payload lacks %s", old)
		}
		return signPayload(t, bytes.Replace(payload, []byte(old), []byte(new), 1), f.runner)
	}
	e := decodeEnv(t, f.upEnv)
	sig, _ := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	sig[len(sig)/2] ^= 0x20
	e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
	badSig, _ := json.Marshal(e)

	stranger := newKey(t)
	strangerUp := packUp(stranger, f.issuer, f.grantPred, f.grantEnv)
	otherIssuer := newKey(t)
	otherGrant, err := grant.MintPack(context.Background(), otherIssuer, f.grantPred)
	if err != nil {
		t.Fatal(err)
	}
	late := f.up
	late.Started, late.Finished = expires.Add(time.Minute), expires.Add(2*time.Minute)
	otherEngine := f.up
	otherEngine.Engine.Version = "27.0.1"
	otherPlan := f.up
	otherPlan.PlanDigest = digestOf(`{"project":"range"}`)
	residual := f.down
	residual.Cleanup = &evidence.PackCleanup{Verified: false, Resources: []evidence.PackCleanupResource{
		{Kind: evidence.KindContainer, ID: hexID("1"), Name: "range-db-3f1d0c9a", Result: evidence.CleanupResidual, Reason: "still running after stop"},
	}}

	cases := []struct {
		name, want string
		env        []byte
		failed     []string
		opts       []evidence.PolicyOption
	}{
		{name: "signature", env: badSig, want: "does not verify", failed: []string{"signature", "issuer-trust", "key-revocation"}},
		{name: "unsigned change", env: withPayload(t, f.upEnv, bytes.Replace(payload, []byte(`"attempt":"a1"`), []byte(`"attempt":"a2"`), 1)),
			want: "does not verify", failed: []string{"signature", "issuer-trust", "key-revocation"}},
		{name: "wrong key", env: signPack(t, stranger, strangerUp), want: "not by a trusted runner key", failed: []string{"signature", "issuer-trust", "key-revocation", "grant"}},
		{name: "issuer as runner", env: signPayload(t, payload, f.issuer), want: "issuer key", failed: []string{"signature", "issuer-trust", "key-revocation"}},
		{name: "untrusted grant issuer", env: signPack(t, f.runner, func() evidence.PackReceipt {
			r := packUp(f.runner, otherIssuer, f.grantPred, otherGrant)
			return r
		}()), want: "not signed by a trusted issuer key", failed: []string{"grant"}},
		{name: "grant expired at up", env: signPack(t, f.runner, late), want: "expired", failed: []string{"grant"}},
		{name: "stale", env: f.upEnv, want: "maxAge", failed: []string{"freshness"}, opts: []evidence.PolicyOption{evidence.WithNow(finished.Add(9000 * time.Hour))}},
		{name: "from the future", env: f.upEnv, want: "clock skew", failed: []string{"freshness"}, opts: []evidence.PolicyOption{evidence.WithNow(started)}},
		{name: "engine mismatch", env: signPack(t, f.runner, otherEngine), want: "engine.version", failed: []string{"grant"}},
		{name: "plan mismatch", env: signPack(t, f.runner, otherPlan), want: "planDigest", failed: []string{"grant"}},
		{name: "subject mismatch", env: resign(`"name":"plan/range"`, `"name":"plan/other"`), want: `subject 1 is named "plan/other", where predicate.pack and predicate.planDigest derives "plan/range"`, failed: []string{"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "subject digest mismatch", env: resign(`"digest":{"sha256":"`+digestOf(packPlan)[7:], `"digest":{"sha256":"`+digestOf("x")[7:]),
			want: `subject "plan/range" has digest sha256:`, failed: []string{"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "unknown field", env: resign(`"attempt":`, `"exit":0,"attempt":`), want: "unknown field", failed: []string{"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "duplicate field", env: resign(`"attempt":"a1"`, `"attempt":"a1","attempt":"a1"`), want: "canonical", failed: []string{"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "non-canonical", env: resign(`"attempt":`, `"attempt": `), want: "canonical", failed: []string{"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "invalid field", env: resign(`"hostPort":49153`, `"hostPort":0`), want: "hostPort", failed: []string{"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "phase receipt type", env: resign(predicate.PackReceipt, predicate.Receipt), want: "predicateType", failed: []string{"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "a grant", env: f.grantEnv, want: "not by a trusted runner key", failed: []string{"signature", "issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome"}},
		{name: "not an envelope", env: []byte(`{"payloadType":"x"}`), want: "", failed: packChecks},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := verifyPack(t, tr, c.env, compose, c.opts...)
			wantPackFailed(t, res, c.want, c.failed...)
			authentic := true
			for _, name := range c.failed {
				authentic = authentic && (name == "freshness" || name == "cleanup")
			}
			if res.OK != authentic || res.Acceptable || (res.Receipt != nil) != res.OK {
				t.Fatalf("OK=%v Acceptable=%v receipt=%v:\n%s", res.OK, res.Acceptable, res.Receipt != nil, describePack(res))
			}
		})
	}

	// A residual teardown is authentic, and acceptable only where the trust
	// does not require verified cleanup.
	env := signPack(t, f.runner, residual)
	res := verifyPack(t, f.trust(t, "accept:\n  requireCleanVerified: true\n"), env, compose)
	wantPackFailed(t, res, "residual: container", "cleanup")
	if !res.OK || res.Acceptable {
		t.Fatalf("residual down: OK=%v Acceptable=%v", res.OK, res.Acceptable)
	}
	res = verifyPack(t, f.trust(t, "accept:\n  requireCleanVerified: false\n"), env, compose)
	if !res.Acceptable {
		t.Fatalf("residual down where cleanup is not required:\n%s", describePack(res))
	}

	// A pack receipt is never a phase receipt, nor the other way round.
	if evidence.IsPackReceipt(newFixture(t).env) || evidence.IsPackReceipt(f.grantEnv) || evidence.IsPackReceipt([]byte("{")) {
		t.Fatal("IsPackReceipt of a phase receipt, a grant or garbage")
	}
	pres := verifyWith(t, tr, f.upEnv, evidence.WithoutOutputsUnsafe())
	if pres.OK {
		t.Fatal("a pack receipt verified as a phase receipt")
	}
	wantCheck(t, pres, "statement", false, "predicateType")
	phase := newFixture(t)
	res = verifyPack(t, phase.trust(t, "", ""), phase.env, nil)
	if res.OK {
		t.Fatal("a phase receipt verified as a pack receipt")
	}
	if c, _ := res.Check("statement"); c.OK || !strings.Contains(c.Reason, "predicateType") {
		t.Fatalf("statement check of a phase receipt: %+v", c)
	}
}

// TestSignPackReceiptValidates: every field is checked before signing, and
// the problem names it.
func TestSignPackReceiptValidates(t *testing.T) {
	f := newPackFixture(t)
	cases := map[string]func(r *evidence.PackReceipt){
		"operation":         func(r *evidence.PackReceipt) { r.Operation = "restart" },
		"runner.id":         func(r *evidence.PackReceipt) { r.Runner.ID = "me" },
		"grant.id":          func(r *evidence.PackReceipt) { r.Grant.ID = "x" },
		"grant.envelope":    func(r *evidence.PackReceipt) { r.Grant.Envelope = json.RawMessage(`[]`) },
		"workspace":         func(r *evidence.PackReceipt) { r.Workspace = "" },
		"attempt":           func(r *evidence.PackReceipt) { r.Attempt = "a\x00" },
		"pack.project":      func(r *evidence.PackReceipt) { r.Pack.Project = "Range" },
		"pack.digest":       func(r *evidence.PackReceipt) { r.Pack.Digest = "sha256:x" },
		"planDigest":        func(r *evidence.PackReceipt) { r.PlanDigest = "" },
		"engine.version":    func(r *evidence.PackReceipt) { r.Engine.Version = "" },
		"containers[0].id":  func(r *evidence.PackReceipt) { r.Containers[0].ID = "abc" },
		"containers[1].id":  func(r *evidence.PackReceipt) { r.Containers[1].ID = r.Containers[0].ID },
		"imageId":           func(r *evidence.PackReceipt) { r.Containers[0].ImageID = "db:latest" },
		"hostConfigSha256":  func(r *evidence.PackReceipt) { r.Containers[0].HostConfigSHA256 = "" },
		"mounts[0].type":    func(r *evidence.PackReceipt) { r.Containers[0].HostConfig.Mounts[0].Type = "npipe" },
		"mounts[0].target":  func(r *evidence.PackReceipt) { r.Containers[0].HostConfig.Mounts[0].Target = "var" },
		"mounts[1].source":  func(r *evidence.PackReceipt) { r.Containers[0].HostConfig.Mounts[1].Source = "/x" },
		"containerPort":     func(r *evidence.PackReceipt) { r.Containers[1].HostConfig.PortBindings[0].ContainerPort = "80" },
		"hostIp":            func(r *evidence.PackReceipt) { r.Containers[1].HostConfig.PortBindings[0].HostIP = "localhost" },
		"memoryBytes":       func(r *evidence.PackReceipt) { r.Containers[0].HostConfig.MemoryBytes = -1 },
		"capAdd[0]":         func(r *evidence.PackReceipt) { r.Containers[1].HostConfig.CapAdd[0] = "" },
		"networks[0].id":    func(r *evidence.PackReceipt) { r.Networks[0].ID = "net" },
		"volumes[1].name":   func(r *evidence.PackReceipt) { r.Volumes = append(r.Volumes, r.Volumes[0]) },
		"choices[0].kind":   func(r *evidence.PackReceipt) { r.Choices[0].Kind = "Host Port" },
		"cleanup":           func(r *evidence.PackReceipt) { r.Cleanup = &evidence.PackCleanup{Verified: true} },
		"finished":          func(r *evidence.PackReceipt) { r.Finished = r.Started.Add(-time.Second) },
		"down containers":   func(r *evidence.PackReceipt) { *r = packDown(*r); r.Containers = f.up.Containers },
		"down cleanup":      func(r *evidence.PackReceipt) { *r = packDown(*r); r.Cleanup = nil },
		"cleanup.verified":  func(r *evidence.PackReceipt) { *r = packDown(*r); r.Cleanup.Verified = false },
		"resources[3].id":   func(r *evidence.PackReceipt) { *r = packDown(*r); r.Cleanup.Resources[3].ID = "x" },
		"resources[0].kind": func(r *evidence.PackReceipt) { *r = packDown(*r); r.Cleanup.Resources[0].Kind = "pod" },
		"resources[3].reason": func(r *evidence.PackReceipt) {
			*r = packDown(*r)
			r.Cleanup.Resources[3].Reason = ""
		},
		"resources[1].id": func(r *evidence.PackReceipt) {
			*r = packDown(*r)
			r.Cleanup.Resources[1].ID = r.Cleanup.Resources[0].ID
		},
	}
	for field, mutate := range cases {
		t.Run(field, func(t *testing.T) {
			r := packUp(f.runner, f.issuer, f.grantPred, f.grantEnv)
			mutate(&r)
			_, err := evidence.SignPackReceipt(context.Background(), f.runner, r)
			want, _, _ := strings.Cut(strings.TrimPrefix(field, "down "), " ")
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("SignPackReceipt with a bad %s: %v", field, err)
			}
		})
	}
	if _, err := evidence.SignPackReceipt(context.Background(), newKey(t), f.up); err == nil || !strings.Contains(err.Error(), "signing key") {
		t.Fatalf("signed by a key that is not runner.id: %v", err)
	}
}

// TestPackReceiptNilListsAreEmpty: nil and empty lists sign the same.
func TestPackReceiptNilListsAreEmpty(t *testing.T) {
	f := newPackFixture(t)
	r := f.up
	r.Choices = nil
	r.Containers = append([]evidence.PackContainer(nil), r.Containers...)
	r.Containers[0].HostConfig.CapAdd = nil
	a := payloadOf(t, signPack(t, f.runner, r))
	r.Choices = []evidence.PackChoice{}
	r.Containers[0].HostConfig.CapAdd = []string{}
	b := payloadOf(t, signPack(t, f.runner, r))
	if !bytes.Equal(a, b) || !bytes.Contains(a, []byte(`"choices":[]`)) {
		t.Fatalf("nil and empty lists differ:\n%s\n%s", a, b)
	}
}

// TestPackUpFailedReceipt: a failed up's receipt (pack-receipt/v2) is
// authentic and never acceptable, and says why the up failed; v1 keeps
// its meaning: it cannot carry the up-failed operation or a failure, and
// v2 cannot carry up or down.
func TestPackUpFailedReceipt(t *testing.T) {
	f := newPackFixture(t)
	tr := f.trust(t, "")
	compose := []byte(packCompose)
	failed := f.down
	failed.Operation, failed.Failure = evidence.PackUpFailed, "service web a service is not running: it is exited, exit code 1"
	failed.Started, failed.Finished = f.up.Started, f.up.Finished
	env := signPack(t, f.runner, failed)
	if !evidence.IsPackReceipt(env) {
		t.Fatal("an up-failed receipt is not recognised as a pack receipt")
	}
	wantPackFailed(t, verifyPack(t, tr, env, compose), "the up failed and its attempt was torn down: service web a service is not running", "outcome")
	// The old receipts still verify as before.
	wantPackFailed(t, verifyPack(t, tr, f.upEnv, compose), "")
	wantPackFailed(t, verifyPack(t, tr, f.downEnv, compose), "")

	payload := payloadOf(t, env)
	v1 := bytes.Replace(payload, []byte("pack-receipt/v2"), []byte("pack-receipt/v1"), 1)
	wantPackFailed(t, verifyPack(t, tr, signPayload(t, v1, f.runner), compose), `does not carry operation "up-failed"`,
		"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome")
	down := bytes.Replace(payloadOf(t, f.downEnv), []byte("pack-receipt/v1"), []byte("pack-receipt/v2"), 1)
	wantPackFailed(t, verifyPack(t, tr, signPayload(t, down, f.runner), compose), `does not carry operation "down"`,
		"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome")
	withFailure := f.down
	withFailure.Failure = "x"
	if _, err := evidence.SignPackReceipt(context.Background(), f.runner, withFailure); err == nil || !strings.Contains(err.Error(), "only an up-failed receipt") {
		t.Errorf("a down receipt with a failure: %v", err)
	}
	noFailure := failed
	noFailure.Failure = ""
	if _, err := evidence.SignPackReceipt(context.Background(), f.runner, noFailure); err == nil || !strings.Contains(err.Error(), "failure") {
		t.Errorf("an up-failed receipt without a failure: %v", err)
	}
}

// TestPackReceiptChildNetworksAndVolumes: a down receipt that lists what
// an engine-socket holder made besides containers (a child network and a
// child volume, left and residual) is a pack-receipt/v3, authentic and
// not acceptable while they are left; under v1 it is refused, and a v3
// without such a child is refused too, so v1 keeps its meaning.
func TestPackReceiptChildNetworksAndVolumes(t *testing.T) {
	f := newPackFixture(t)
	tr := f.trust(t, "")
	compose := []byte(packCompose)
	left := "created through the engine while web held its socket; custody never removes it"
	d := f.down
	d.Cleanup = &evidence.PackCleanup{Resources: append(slices.Clone(f.down.Cleanup.Resources),
		evidence.PackCleanupResource{Kind: evidence.KindChildNetwork, ID: hexID("c"), Name: "made-by-web", Result: evidence.CleanupResidual, Reason: left},
		evidence.PackCleanupResource{Kind: evidence.KindChildVolume, ID: "scratch", Name: "scratch", Result: evidence.CleanupResidual, Reason: left})}
	env := signPack(t, f.runner, d)
	payload := payloadOf(t, env)
	if !bytes.Contains(payload, []byte(`"predicateType":"`+predicate.PackReceiptV3+`"`)) || !evidence.IsPackReceipt(env) {
		t.Fatalf("a down receipt with child networks and volumes: %s", payload)
	}
	wantPackFailed(t, verifyPack(t, tr, env, compose), "child-network "+hexID("c")+` "made-by-web" (`+left+`)`, "cleanup")

	v1 := bytes.Replace(payload, []byte("pack-receipt/v3"), []byte("pack-receipt/v1"), 1)
	wantPackFailed(t, verifyPack(t, tr, signPayload(t, v1, f.runner), compose), `does not carry operation "down" with cleanup kinds container, network, volume, child-network, child-volume: that is "`+predicate.PackReceiptV3,
		"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome")
	v3 := bytes.Replace(payloadOf(t, f.downEnv), []byte("pack-receipt/v1"), []byte("pack-receipt/v3"), 1)
	wantPackFailed(t, verifyPack(t, tr, signPayload(t, v3, f.runner), compose), `does not carry operation "down"`,
		"issuer-trust", "key-revocation", "statement", "grant", "compose", "freshness", "cleanup", "outcome")

	// A child volume's id is its name, as a volume's is.
	bad := d
	bad.Cleanup = &evidence.PackCleanup{Resources: slices.Clone(d.Cleanup.Resources)}
	bad.Cleanup.Resources[len(bad.Cleanup.Resources)-1].Name = "other"
	if _, err := evidence.SignPackReceipt(context.Background(), f.runner, bad); err == nil || !strings.Contains(err.Error(), "a volume's id is its name") {
		t.Errorf("a child volume whose id is not its name: %v", err)
	}
}

// TestPackPolicy: VerifyPack runs under a policy made by NewPackPolicy, as
// Verify does: the compose choice is explicit, a bad skew and a policy not
// made by NewPackPolicy are refused before any check; an empty compose
// file is compared (and is not the pack's), and WithNow moves freshness.
func TestPackPolicy(t *testing.T) {
	f := newPackFixture(t)
	v := newVerifier(t, f.trust(t, ""))
	ctx := context.Background()

	if _, err := evidence.NewPackPolicy(evidence.ComposeOption{}); err == nil || !strings.Contains(err.Error(), "WithCompose") {
		t.Errorf("a policy without a compose choice: %v", err)
	}
	if _, err := evidence.NewPackPolicy(evidence.WithoutCompose(), evidence.WithClockSkew(-time.Second)); err == nil || !strings.Contains(err.Error(), "negative clock skew") {
		t.Errorf("a negative clock skew: %v", err)
	}
	if res, err := v.VerifyPack(ctx, f.upEnv, evidence.PackPolicy{}); err == nil || res != nil || !strings.Contains(err.Error(), "NewPackPolicy") {
		t.Errorf("a zero policy: %v %v", res, err)
	}

	pol, err := evidence.NewPackPolicy(evidence.WithCompose(nil), evidence.WithNow(verifyNow))
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.VerifyPack(ctx, f.upEnv, pol)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !res.ComposeChecked {
		t.Fatalf("an empty compose file:\n%s", describePack(res))
	}
	wantPackFailed(t, res, digestOf(""), "compose")

	late, err := evidence.NewPackPolicy(evidence.WithoutCompose(), evidence.WithNow(verifyNow.Add(48*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if res, err = v.VerifyPack(ctx, f.upEnv, late); err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Acceptable {
		t.Fatalf("two days later:\n%s", describePack(res))
	}
	wantPackFailed(t, res, "maxAge", "compose", "freshness")
}
