package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/pool"
	"github.com/custody-dev/custody/predicate"
	"github.com/custody-dev/custody/store"
)

// poolSection is a pool profile matching d.phase's plans exactly (64Mi,
// 64 pids, the default cpu, tmp and output, /out, development).
const poolSection = `pool:
  - name: small
    image: "%s"
    tier: development
    size: %d
    idleTTL: %s
    resources: {memory: 64Mi, pids: 64, cpu: 1, tmpBytes: 8Mi, outputPath: /out, outputBytes: 8Mi}
`

// withPool writes the test policy with a pool of size and ttl, reloads it
// and waits until the pool is full.
func (d *daemon) withPool(size int, ttl string) {
	d.t.Helper()
	writeFile(d.t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+fmt.Sprintf(poolSection, d.image, size, ttl))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		d.t.Fatalf("reload: %v %+v", err, st)
	}
	d.waitPool(size)
}

// waitPool waits until the pool holds n idle members.
func (d *daemon) waitPool(n int) {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for d.s.r.Pool().Status()["small"] != n {
		if time.Now().After(deadline) {
			d.t.Fatalf("pool holds %v, want %d", d.s.r.Pool().Status(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// members are the pool members' attempts in the journal, by run id.
func (d *daemon) members() map[string]journal.Attempt {
	d.t.Helper()
	as, err := d.s.r.Attempts()
	if err != nil {
		d.t.Fatal(err)
	}
	out := map[string]journal.Attempt{}
	for _, a := range as {
		if pool.IsMember(a) {
			out[a.RunID] = a
		}
	}
	return out
}

// pooledOf decodes a receipt's predicate type and pooled record.
func pooledOf(t *testing.T, rcpt *api.Receipt) (string, map[string]any) {
	t.Helper()
	var envl struct{ Payload string }
	if err := json.Unmarshal(rcpt.Envelope, &envl); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(envl.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		PredicateType string `json:"predicateType"`
		Predicate     struct {
			Pooled map[string]any `json:"pooled"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	return st.PredicateType, st.Predicate.Pooled
}

// phaseFrom is d.phase with the input read from dir (relative to d.dir).
func (d *daemon) issueFrom(src, script string) []byte {
	d.t.Helper()
	ps := d.phase(script)
	ps.YAML = bytes.Replace(ps.YAML, []byte("source: ./src"), []byte("source: ./"+src), 1)
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: ps, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		d.t.Fatalf("issue: %v", err)
	}
	return env
}

// TestPoolServesEachGrantItsOwnInputs: two grants of the same profile,
// live at the same time, each take a pooled sandbox and see only their own
// input (the other's content is nowhere in their sandbox); both receipts
// are v5 and say pooled, prepared before the run; each member is destroyed
// after its one run and verified clean, and the pool refills. A grant that
// matches no profile launches cold (a v3 receipt, no pooled).
func TestPoolServesEachGrantItsOwnInputs(t *testing.T) {
	d := startDaemon(t)
	d.withPool(2, "10m")
	before := d.members()
	writeFile(t, filepath.Join(d.dir, "srcA", "hello.txt"), "ALPHA-INPUT\n")
	writeFile(t, filepath.Join(d.dir, "srcB", "hello.txt"), "BRAVO-INPUT\n")
	// Each waits for the other to be live, then looks for both inputs.
	script := "cat /in/hello.txt; touch /out/ready; sleep 1; grep -rs -e ALPHA-INPUT -e BRAVO-INPUT / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | sed 's/^/found /'; true"
	grants := [][]byte{d.issueFrom("srcA", script), d.issueFrom("srcB", script)}
	type outcome struct {
		res  *api.Result
		rcpt *api.Receipt
		out  string
		err  error
	}
	outs := make([]outcome, 2)
	var wg sync.WaitGroup
	for i, g := range grants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b bytes.Buffer
			res, rcpt, err := d.submit.RunWithReceipt(context.Background(), g, &b, &b, nil)
			outs[i] = outcome{res, rcpt, b.String(), err}
		}()
	}
	wg.Wait()
	own := []string{"ALPHA-INPUT", "BRAVO-INPUT"}
	for i, o := range outs {
		if o.err != nil || o.res.Status != api.StatusOK {
			t.Fatalf("run %d: %v %+v\n%s", i, o.err, o.res, o.out)
		}
		other := own[1-i]
		if !strings.Contains(o.out, own[i]) || strings.Contains(o.out, other) {
			t.Errorf("run %d saw %q: want its own input %s and never %s", i, o.out, own[i], other)
		}
		ptype, pooled := pooledOf(t, o.rcpt)
		if ptype != predicate.ReceiptV5 || pooled == nil || pooled["profile"] != "small" {
			t.Fatalf("run %d receipt: %s pooled %v, want v5 pooled from profile small", i, ptype, pooled)
		}
		if _, served := before[fmt.Sprint(pooled["sandbox"])]; !served {
			t.Errorf("run %d names sandbox %v, not a member prepared before it", i, pooled["sandbox"])
		}
	}
	if outs[0].rcpt != nil && outs[1].rcpt != nil {
		_, a := pooledOf(t, outs[0].rcpt)
		_, b := pooledOf(t, outs[1].rcpt)
		if a["sandbox"] == b["sandbox"] {
			t.Fatalf("two grants were served by one pooled sandbox %v", a["sandbox"])
		}
	}
	// Each served member is destroyed after its run and verified clean.
	after := d.members()
	for _, o := range outs {
		_, pooled := pooledOf(t, o.rcpt)
		a := after[fmt.Sprint(pooled["sandbox"])]
		if a.State != journal.Clean || len(a.Outstanding()) != 0 || !strings.Contains(a.Detail, "served run") {
			t.Errorf("served member %v: %s %q, outstanding %v", pooled["sandbox"], a.State, a.Detail, a.Outstanding())
		}
	}
	d.waitPool(2)

	// No profile matches 128Mi: cold, as without a pool.
	ps := d.phase("echo cold")
	ps.YAML = bytes.Replace(ps.YAML, []byte("memory: 64Mi"), []byte("memory: 128Mi"), 1)
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: ps, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), env, &b, &b, nil)
	if err != nil || res.Status != api.StatusOK || !strings.Contains(b.String(), "cold") {
		t.Fatalf("cold run: %v %+v %s", err, res, b.String())
	}
	if ptype, pooled := pooledOf(t, rcpt); ptype != predicate.ReceiptV3 || pooled != nil {
		t.Fatalf("cold receipt: %s pooled %v, want v3 and no pooled", ptype, pooled)
	}
	if n := d.s.r.Pool().Status()["small"]; n != 2 {
		t.Errorf("a cold launch took a pooled sandbox: %d left", n)
	}
}

// TestPoolDrains: a member idle past its TTL is destroyed and verified
// clean (and replaced); a policy change drains every member made under
// the old policy; a runtime whose digest changed drains the pool and
// prepares nothing until it is back; the quarantine drains it and keeps
// it empty.
func TestPoolDrains(t *testing.T) {
	runc := filepath.Join(t.TempDir(), "runc")
	d := startDaemonWith(t, func(c *config.Config) {
		data, err := os.ReadFile(c.Runner.Runtime.Path)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, runc, string(data))
		if err := os.Chmod(runc, 0o755); err != nil {
			t.Fatal(err)
		}
		if c.Runner.Gate == "" {
			c.Runner.Gate = filepath.Join(filepath.Dir(c.Runner.Runtime.Path), "custody-gate")
		}
		c.Runner.Runtime.Path = runc
	}, nil)
	destroyedFor := func(ids map[string]journal.Attempt, why string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for id := range ids {
			for {
				a := d.members()[id]
				if a.State == journal.Clean && strings.Contains(a.Detail, why) && len(a.Outstanding()) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("member %s: %s %q, want clean because %s", id, a.State, a.Detail, why)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	live := func() map[string]journal.Attempt {
		out := map[string]journal.Attempt{}
		for id, a := range d.members() {
			if a.State == journal.Running {
				out[id] = a
			}
		}
		return out
	}

	t.Run("idle TTL", func(t *testing.T) {
		d.withPool(1, "1s")
		first := live()
		destroyedFor(first, "idled past its TTL")
		d.waitPool(1)
	})
	t.Run("policy change", func(t *testing.T) {
		d.withPool(1, "10m")
		old := live()
		d.withPool(2, "10m") // another digest
		destroyedFor(old, "the policy changed")
	})
	t.Run("runtime digest change", func(t *testing.T) {
		d.waitPool(2)
		old := live()
		orig, err := os.ReadFile(runc)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, runc, string(orig)+"\x00")
		destroyedFor(old, "the runtime changed")
		time.Sleep(1500 * time.Millisecond)
		if n := d.s.r.Pool().Status()["small"]; n != 0 {
			t.Fatalf("the pool holds %d members under a runtime that is not the pinned one", n)
		}
		writeFile(t, runc, string(orig))
		d.waitPool(2)
	})
	t.Run("quarantine", func(t *testing.T) {
		old := live()
		if err := d.s.db.SetQuarantine(storeQuarantine("pool test")); err != nil {
			t.Fatal(err)
		}
		destroyedFor(old, "quarantined")
		time.Sleep(1500 * time.Millisecond)
		if n := d.s.r.Pool().Status()["small"]; n != 0 {
			t.Fatalf("a quarantined runner keeps %d pooled sandboxes", n)
		}
		if err := d.s.db.ClearQuarantine(); err != nil {
			t.Fatal(err)
		}
		d.waitPool(2)
	})
}

func storeQuarantine(reason string) store.Quarantine {
	return store.Quarantine{Since: time.Now().UTC(), Reason: reason}
}

// TestPoolProfileRefusedAtLoad: a profile whose image this runner does not
// hold refuses the whole policy at load (the requirement, the reason and
// the fix), so nothing is granted; a servable one loads, and its image can
// then be neither removed nor pruned.
func TestPoolProfileRefusedAtLoad(t *testing.T) {
	d := startDaemon(t)
	unknown := "sha256:" + strings.Repeat("ab", 32)
	pol := fmt.Sprintf(testPolicy, d.image, d.dir)
	pol = strings.Replace(pol, "images:\n", "images:\n  - digest: \""+unknown+"\"\n", 1)
	writeFile(t, d.cfg.Policy, pol+fmt.Sprintf(poolSection, unknown, 1, "10m"))
	st, err := d.control.ReloadPolicy(context.Background())
	if err != nil || !strings.Contains(st.Error, "pool[0].image") || !strings.Contains(st.Error, "fix:") {
		t.Fatalf("reload with an unknown pooled image: %v %+v", err, st)
	}
	_, err = d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: d.phase("true"), Actor: "ci-bot", TTL: "1m"})
	if err == nil {
		t.Fatal("a grant was issued under a refused policy")
	}
	if n := len(d.s.r.Pool().Status()); n != 0 {
		t.Fatalf("a refused policy configured a pool: %v", d.s.r.Pool().Status())
	}
	d.withPool(1, "10m")
	// The pooled sandboxes' rootfs is the image: removing or pruning it is
	// refused while the pool uses it.
	err = d.control.RemoveImage(context.Background(), d.image)
	if err == nil || !strings.Contains(err.Error(), "warm pool") {
		t.Fatalf("remove the pooled image: %v", err)
	}
	if _, err := d.control.PruneImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.control.InspectImage(context.Background(), d.image); err != nil {
		t.Fatalf("prune removed the pooled image: %v", err)
	}
}

// TestOperatorRecoverWithAFullPool: an operator's recovery while the pool
// is full destroys the idle members first (they are this runner's live
// attempts, not a dead one's) and verifies them clean; nothing is
// quarantined, and the refilled pool serves a grant.
func TestOperatorRecoverWithAFullPool(t *testing.T) {
	d := startDaemon(t)
	d.withPool(2, "10m")
	before := d.members()
	if _, err := d.control.Recover(context.Background()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	for id := range before {
		a := d.members()[id]
		if a.State != journal.Clean || !strings.Contains(a.Detail, "recovery") || len(a.Outstanding()) != 0 {
			t.Errorf("member %s after recovery: %s %q %v", id, a.State, a.Detail, a.Outstanding())
		}
	}
	if q, err := d.control.Quarantine(context.Background()); err != nil || q.Quarantined {
		t.Fatalf("quarantine after recovery: %+v %v", q, err)
	}
	d.waitPool(2)
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), d.issue("cat /in/hello.txt"), io.Discard, io.Discard, nil)
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("run after recovery: %v %+v", err, res)
	}
	if ptype, _ := pooledOf(t, rcpt); ptype != predicate.ReceiptV5 {
		t.Fatalf("run after recovery: %s, want pooled", ptype)
	}
}

// TestPoolProfileUnmatchableRefusedAtLoad: a profile no grant could take
// (a uid or gid outside the sandbox's id map, root under
// users.forbidRoot, scratch above its memory) refuses the policy at load,
// naming the field, the reason and the fix; nothing is pooled. The same
// profile within those limits loads and fills.
func TestPoolProfileUnmatchableRefusedAtLoad(t *testing.T) {
	d := startDaemon(t)
	base := fmt.Sprintf(testPolicy, d.image, d.dir)
	section := fmt.Sprintf(poolSection, d.image, 1, "10m")
	for _, c := range []struct{ name, policy, field string }{
		{"uid", base + strings.Replace(section, "    tier:", "    uid: 70000\n    tier:", 1), "pool[0].uid"},
		{"gid", base + strings.Replace(section, "    tier:", "    gid: 65536\n    tier:", 1), "pool[0].gid"},
		{"root", strings.Replace(base, "tiers:", "users: {forbidRoot: true}\ntiers:", 1) + section, "pool[0].uid"},
		{"tmp", base + strings.Replace(section, "memory: 64Mi", "memory: 16Mi", 1), "pool[0].resources.tmpBytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d.withPool(1, "10m") // a pool the refused policy must not keep
			if c.name == "tmp" {
				// 8Mi scratch within 16Mi fits: make it 32Mi.
				c.policy = strings.Replace(c.policy, "tmpBytes: 8Mi, outputPath", "tmpBytes: 32Mi, outputPath", 1)
			}
			writeFile(t, d.cfg.Policy, c.policy)
			st, err := d.control.ReloadPolicy(context.Background())
			if err != nil || !strings.Contains(st.Error, c.field+":") || !strings.Contains(st.Error, "fix:") {
				t.Fatalf("reload: %v %+v; want refused naming %s and a fix", err, st, c.field)
			}
			// Nothing fails open: under the refused policy the pool drains.
			deadline := time.Now().Add(10 * time.Second)
			for len(d.s.r.Pool().Status()) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("a refused policy left a pool: %v", d.s.r.Pool().Status())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestPoolUpkeepIdleWithoutProfiles: with no profile the pool's upkeep
// makes no round on its own (no store read each second); a policy reload
// wakes it at once, and it keeps the pool full from then on.
func TestPoolUpkeepIdleWithoutProfiles(t *testing.T) {
	d := startDaemon(t)
	writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir))
	if _, err := d.control.ReloadPolicy(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the reload's own round
	before := d.s.poolRounds.Load()
	time.Sleep(2500 * time.Millisecond)
	if n := d.s.poolRounds.Load() - before; n != 0 {
		t.Fatalf("the upkeep made %d rounds in 2.5 s with no profile; want none", n)
	}
	d.withPool(1, "10m") // fills only if the reload woke the upkeep
	before = d.s.poolRounds.Load()
	time.Sleep(2500 * time.Millisecond)
	if n := d.s.poolRounds.Load() - before; n < 2 {
		t.Fatalf("the upkeep made %d rounds in 2.5 s with a profile; want its tick", n)
	}
}

// TestPoolBackoffInStatus: a profile whose members cannot be prepared (a
// 1 MiB memory budget runc's own init cannot start in) backs off, and
// custody status says so: its state, the last error and the next try;
// beside it a profile that prepares is ready.
func TestPoolBackoffInStatus(t *testing.T) {
	d := startDaemon(t)
	failing := strings.Replace(strings.Replace(fmt.Sprintf(poolSection, d.image, 1, "10m"), "pool:\n", "", 1),
		"name: small", "name: tiny", 1)
	failing = strings.Replace(failing, "memory: 64Mi", "memory: 1Mi", 1)
	failing = strings.Replace(failing, "tmpBytes: 8Mi", "tmpBytes: 1Mi", 1)
	writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+fmt.Sprintf(poolSection, d.image, 1, "10m")+failing)
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	d.waitPool(1)
	var tiny api.PoolProfile
	for deadline := time.Now().Add(20 * time.Second); tiny.Failures < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("profile tiny: %+v; want two failed preparations", tiny)
		}
		st, err := d.control.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Pool {
			switch p.Name {
			case "tiny":
				tiny = p
			case "small":
				if p.State != pool.Ready || p.Failures != 0 || p.Idle != 1 {
					t.Fatalf("profile small: %+v; want ready", p)
				}
			}
		}
	}
	if tiny.State != pool.Backoff || tiny.LastError == "" || tiny.NextTry.Sub(tiny.LastFailure) != 2*time.Second {
		t.Fatalf("profile tiny: %+v; want backoff with its error and a next try 2 s after the second failure", tiny)
	}
	if q, err := d.control.Quarantine(context.Background()); err != nil || q.Quarantined {
		t.Fatalf("a failed preparation quarantined the runner: %+v %v", q, err)
	}
}

// TestPooledAndColdEnvAreTheGrants: a cold and a pooled launch of the same
// phase see exactly the grant's resolved environment (its declared
// variable and custody's default PATH), and nothing the runtime adds
// (runc sets HOME when the environment has none).
func TestPooledAndColdEnvAreTheGrants(t *testing.T) {
	d := startDaemon(t)
	writeFile(t, filepath.Join(d.dir, "src", "x"), "x")
	script := "export -p > /out/env"
	issue := func() []byte {
		ps := d.phase(script)
		ps.YAML = append(ps.YAML, "env: {DECLARED: yes}\n"...)
		env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: ps, Actor: "ci-bot", TTL: "15m"})
		if err != nil {
			t.Fatalf("issue: %v", err)
		}
		return env
	}
	envOf := func(g []byte) (string, bool) {
		t.Helper()
		var out bytes.Buffer
		res, rcpt, err := d.submit.RunWithReceipt(context.Background(), g, &out, &out, nil)
		if err != nil || res.Status != api.StatusOK || res.Output == nil || len(res.Output.Files) != 1 {
			t.Fatalf("run: %v %+v %s", err, res, out.String())
		}
		b, err := os.ReadFile(filepath.Join(res.Output.Path, "env"))
		if err != nil {
			t.Fatal(err)
		}
		_, pooled := pooledOf(t, rcpt)
		return string(b), pooled != nil
	}
	cold, pooled := envOf(issue())
	if pooled {
		t.Fatal("a run without a pool was pooled")
	}
	d.withPool(1, "10m")
	warm, pooled := envOf(issue())
	if !pooled {
		t.Fatal("the run did not take the pooled sandbox")
	}
	for name, got := range map[string]string{"cold": cold, "pooled": warm} {
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
			name, _, _ := strings.Cut(strings.TrimPrefix(l, "export "), "=")
			if name != "PWD" && name != "SHLVL" && name != "OLDPWD" { // the shell's own
				names = append(names, name)
			}
		}
		if strings.Join(names, " ") != "DECLARED PATH" {
			t.Errorf("the %s launch's environment is %q, want DECLARED and PATH only:\n%s", name, names, got)
		}
	}
	if cold != warm {
		t.Errorf("a cold and a pooled launch of one phase saw different environments:\ncold:\n%s\npooled:\n%s", cold, warm)
	}
}

// TestPoolDefaultsMatchRequests: with ceilings.outputFiles 8192, a profile
// that leaves outputFiles out and a request that leaves maxFiles out
// resolve the same bound, so the request takes a pooled sandbox; status
// and the metrics count the hit, and a launch that no profile matches
// counts a miss naming the first field that differed.
func TestPoolDefaultsMatchRequests(t *testing.T) {
	d := startDaemon(t)
	writeFile(t, filepath.Join(d.dir, "src", "x"), "x")
	pol := strings.Replace(fmt.Sprintf(testPolicy, d.image, d.dir), "inputBytes: 64Mi}", "inputBytes: 64Mi, outputFiles: 8192}", 1)
	writeFile(t, d.cfg.Policy, pol+fmt.Sprintf(poolSection, d.image, 1, "10m"))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	d.waitPool(1)
	var out bytes.Buffer
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), d.issue("true"), &out, &out, nil)
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("run: %v %+v %s", err, res, out.String())
	}
	if _, pooled := pooledOf(t, rcpt); pooled == nil {
		t.Error("a request without maxFiles did not take the profile without outputFiles")
	}
	status := func() []api.PoolProfile {
		t.Helper()
		st, err := d.control.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Pool
	}
	ps := status()
	if len(ps) != 1 || ps[0].Hits != 1 || ps[0].Misses != 0 {
		t.Errorf("status after a pooled run: %+v", ps)
	}
	ps2 := d.phase("true")
	ps2.YAML = bytes.Replace(ps2.YAML, []byte("memory: 64Mi"), []byte("memory: 128Mi"), 1)
	g, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: ps2, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatal(err)
	}
	res, rcpt, err = d.submit.RunWithReceipt(context.Background(), g, &out, &out, nil)
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("cold run: %v %+v", err, res)
	}
	if _, pooled := pooledOf(t, rcpt); pooled != nil {
		t.Error("a run no profile matches was pooled")
	}
	ps = status()
	if len(ps) != 1 || ps[0].Hits != 1 || ps[0].Misses != 1 || ps[0].LastMiss == nil || ps[0].LastMiss.Field != "resources.memory" {
		t.Errorf("status after a run no profile matches: %+v", ps)
	}
	m := httptest.NewRecorder()
	d.s.metrics.handler().ServeHTTP(m, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`custody_pool_hits_total{profile="small"} 1`, `custody_pool_misses_total{field="resources.memory",profile="small"} 1`} {
		if !strings.Contains(m.Body.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, m.Body.String())
		}
	}
}

// TestPoolProfileNoRequestMatchesRefused: a profile whose sandboxes no
// admissible request could take (its cpu is below what admission grants)
// refuses the policy when it loads, naming the profile, the field, the
// reason and the fix; a broken policy refuses everything.
func TestPoolProfileNoRequestMatchesRefused(t *testing.T) {
	d := startDaemon(t)
	writeFile(t, filepath.Join(d.dir, "src", "x"), "x")
	section := strings.Replace(fmt.Sprintf(poolSection, d.image, 1, "10m"), "cpu: 1,", "cpu: 0.005,", 1)
	writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+section)
	st, err := d.control.ReloadPolicy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pool[0]", "small", "resources.cpu", "fix:"} {
		if !strings.Contains(st.Error, want) {
			t.Errorf("the refusal does not name %s: %q", want, st.Error)
		}
	}
	if _, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: d.phase("true"), Actor: "ci-bot", TTL: "15m"}); err == nil {
		t.Error("a broken policy issued a grant")
	}
}

// TestPoolStateWhileQuarantined: a pooled run whose cleanup cannot be
// verified quarantines the runner; its pool is then reported quarantined
// (nothing is made or served), never filling, and once the operator
// releases the runner the pool fills again.
func TestPoolStateWhileQuarantined(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	writeFile(t, filepath.Join(d.dir, "src", "x"), "x")
	d.withPool(1, "10m")
	f := d.runHeld()
	state := func() string {
		t.Helper()
		st, err := d.control.Status(ctx)
		if err != nil || len(st.Pool) != 1 {
			t.Fatalf("status: %+v %v", st, err)
		}
		return st.Pool[0].State
	}
	if got := state(); got != pool.Quarantined {
		t.Errorf("the pool of a quarantined runner is %q, want %q", got, pool.Quarantined)
	}
	f.Close()
	if err := d.control.ReleaseQuarantine(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	d.waitPool(1)
	if got := state(); got != pool.Ready {
		t.Errorf("the pool after the release is %q, want ready", got)
	}
}
