package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
)

// daemon is a custodyd serving on temporary sockets, with the busybox
// image imported and an input directory.
type daemon struct {
	t       *testing.T
	s       *server
	dir     string
	cfg     config.Config
	control *api.Client
	submit  *api.Client
	image   string
	src     string // an input directory
	stop    func()
}

const testPolicy = `apiVersion: custody.dev/v1alpha1
kind: Policy
images:
  - digest: "%s"
actors:
  - name: ci-bot
    stages: [build, test]
    submitters: {uids: [0]}
inputRoots: ["%s"]
ceilings: {memory: 512Mi, pids: 256, cpu: 2, wallTime: 10m, outputBytes: 64Mi, tmpBytes: 64Mi, inputBytes: 64Mi}
defaults: {cpu: 1, outputBytes: 8Mi, tmpBytes: 8Mi}
tiers: {development: true}
`

func startDaemon(t *testing.T, operators ...uint32) *daemon {
	t.Helper()
	return startDaemonWith(t, nil, nil, operators...)
}

// startDaemonWith is startDaemon with mod applied to the configuration
// and, if logs is set, custodyd's log written there too.
func startDaemonWith(t *testing.T, mod func(*config.Config), logs io.Writer, operators ...uint32) *daemon {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if len(operators) == 0 {
		operators = []uint32{0}
	}
	cfg := config.Config{
		Runner: config.Runner{
			StateDir: filepath.Join(dir, "state"), RuntimeDir: filepath.Join(dir, "run"),
			Runtime: runnerPinned(path, version, sha),
		},
		Policy:        filepath.Join(dir, "policy.yaml"),
		ControlSocket: filepath.Join(dir, "sock", "control.sock"),
		SubmitSocket:  filepath.Join(dir, "sock", "submit.sock"),
		Operators:     operators,
		MaxGrantTTL:   "24h",
	}
	// The image digest is only known after import; start with a policy
	// that allows nothing, then write the real one and reload.
	writeFile(t, cfg.Policy, fmt.Sprintf(testPolicy, "sha256:"+strings.Repeat("0", 64), dir))
	if mod != nil {
		mod(&cfg)
	}
	var logTo io.Writer = io.Discard
	if testing.Verbose() {
		logTo = os.Stderr
	}
	if logs != nil {
		logTo = io.MultiWriter(logTo, logs)
	}
	log := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := newServer(ctx, cfg, log, testBackends)
	if err != nil {
		cancel()
		t.Fatalf("newServer: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx) }()
	d := &daemon{t: t, s: s, dir: dir, cfg: cfg,
		control: api.NewClient(cfg.ControlSocket), submit: api.NewClient(cfg.SubmitSocket)}
	d.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		s.close()
	}
	t.Cleanup(func() { d.stop() })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := d.submit.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if operators[0] != 0 {
		return d // non-operator daemon: the tests only probe the control socket
	}
	raw, err := d.control.ImportImage(ctx, testenv.BusyboxRootfs(t))
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	var img struct{ Digest string }
	if err := json.Unmarshal(raw, &img); err != nil {
		t.Fatal(err)
	}
	d.image = img.Digest
	writeFile(t, cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir))
	if st, err := d.control.ReloadPolicy(ctx); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	d.src = filepath.Join(dir, "src")
	writeFile(t, filepath.Join(d.src, "hello.txt"), "hello\n")
	return d
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// phase is a build phase running script with the input at /in.
func (d *daemon) phase(script string) api.PhaseSource {
	y := fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: test
stage: build
tier: development
image: %q
command: ["/bin/sh", "-c", %q]
inputs:
  - source: ./src
    target: /in
output: {path: /out}
resources: {memory: 64Mi, pids: 64, wallTime: 30s}
`, d.image, script)
	return api.PhaseSource{YAML: []byte(y), BaseDir: d.dir}
}

func (d *daemon) issue(script string) []byte {
	d.t.Helper()
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: d.phase(script), Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		d.t.Fatalf("issue: %v", err)
	}
	return env
}

func (d *daemon) run(env []byte) (*api.Result, string, error) {
	var out bytes.Buffer
	res, err := d.submit.Run(context.Background(), env, &out, &out, nil)
	return res, out.String(), err
}

// launches counts runs the runner recorded as started (launch dirs made).
func (d *daemon) noLaunchState() {
	d.t.Helper()
	ents, _ := os.ReadDir(d.cfg.Runner.RuntimeDir)
	if len(ents) != 0 {
		d.t.Fatalf("launch state exists: %v", ents)
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want api error %q", err, err, code)
	}
	if string(ae.Code) != code {
		t.Fatalf("code = %q (%s), want %q", ae.Code, ae.Message, code)
	}
}

func TestGrantFlow(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	adm, err := d.submit.Admit(ctx, api.AdmitRequest{PhaseSource: d.phase("true")})
	if err != nil || !adm.Admitted {
		t.Fatalf("admit: %v %+v", err, adm)
	}
	env := d.issue("cat /in/hello.txt; cat /in/hello.txt > /out/copy.txt")
	res, out, err := d.run(env)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if res.Status != api.StatusOK || !strings.Contains(out, "hello") || res.GrantID == "" || res.Actor != "ci-bot" ||
		res.Output == nil || len(res.Output.Files) != 1 || !res.Cleanup.Verified {
		t.Fatalf("result %+v\noutput %q", res, out)
	}
	// The recorded result is fetchable by its owner.
	got, err := d.submit.GetRun(ctx, res.RunID)
	if err != nil || got.RunID != res.RunID {
		t.Fatalf("GetRun: %v %+v", err, got)
	}
	// The grant is single use.
	_, _, err = d.run(env)
	wantCode(t, err, "replayed")
	d.noLaunchState()
}

func TestConcurrentSubmissionsLaunchOnce(t *testing.T) {
	d := startDaemon(t)
	env := d.issue("echo launched")
	const n = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	launched, replayed := 0, 0
	var other []error
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, _, err := d.run(env)
			mu.Lock()
			defer mu.Unlock()
			var ae *api.Error
			switch {
			case err == nil && res.Status == api.StatusOK:
				launched++
			case errors.As(err, &ae) && ae.Code == "replayed":
				replayed++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if launched != 1 || replayed != n-1 || len(other) > 0 {
		t.Fatalf("%d launched, %d replayed, other errors %v; want exactly 1 launch", launched, replayed, other)
	}
}

func TestGrantRefusals(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	stranger, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		code string
		// prepare returns the grant to submit after arranging the world.
		prepare func() []byte
		undo    func()
	}{
		{"expired", "expired", func() []byte {
			env := d.issue("echo SHOULD-NOT-RUN")
			d.s.now = func() time.Time { return time.Now().Add(time.Hour) }
			return env
		}, func() { d.s.now = time.Now }},
		{"not yet valid", "not-yet-valid", func() []byte {
			env := d.issue("echo SHOULD-NOT-RUN")
			d.s.now = func() time.Time { return time.Now().Add(-time.Hour) }
			return env
		}, func() { d.s.now = time.Now }},
		{"revoked", "revoked", func() []byte {
			env := d.issue("echo SHOULD-NOT-RUN")
			id := grantID(t, env)
			if err := d.control.Revoke(ctx, api.RevokeRequest{ID: id, Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			return env
		}, nil},
		{"tampered", "tampered", func() []byte { return tamper(t, d.issue("echo SHOULD-NOT-RUN")) }, nil},
		{"wrong issuer", "wrong-issuer", func() []byte {
			env := d.issue("echo SHOULD-NOT-RUN")
			g, err := d.s.verifier.Verify(ctx, env, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			forged, err := grant.Mint(ctx, stranger, g.Predicate)
			if err != nil {
				t.Fatal(err)
			}
			return forged
		}, nil},
		{"input changed after issue", "inputs-changed", func() []byte {
			env := d.issue("echo SHOULD-NOT-RUN")
			writeFile(t, filepath.Join(d.src, "hello.txt"), "changed\n")
			return env
		}, func() { writeFile(t, filepath.Join(d.src, "hello.txt"), "hello\n") }},
		{"policy changed since issue", "policy-changed", func() []byte {
			env := d.issue("echo SHOULD-NOT-RUN")
			writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+"# edited\n")
			if _, err := d.control.ReloadPolicy(ctx); err != nil {
				t.Fatal(err)
			}
			return env
		}, func() {
			writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir))
			d.control.ReloadPolicy(ctx)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := c.prepare()
			if c.undo != nil {
				defer c.undo()
			}
			res, out, err := d.run(env)
			wantCode(t, err, c.code)
			if res != nil || strings.Contains(out, "SHOULD-NOT-RUN") {
				t.Fatalf("a refused grant ran: %+v %q", res, out)
			}
			d.noLaunchState()
			// Refusals before consumption leave the grant unconsumed.
			if c.code != "tampered" && c.code != "wrong-issuer" {
				if _, err := d.s.db.GrantUsed(grantID(t, env)); err == nil {
					t.Fatalf("a refused grant was consumed")
				}
			}
		})
	}
}

func TestImageChangedAfterIssue(t *testing.T) {
	d := startDaemon(t)
	env := d.issue("echo SHOULD-NOT-RUN")
	hex := strings.TrimPrefix(d.image, "sha256:")
	dir := filepath.Join(d.cfg.Runner.StateDir, "images", hex)
	passwd := filepath.Join(dir, "rootfs", "etc", "passwd")
	// A sealed image runs from its sealed file, not the directory: the
	// sealed file's copy of /etc/passwd is what is changed then.
	if sealedFile := filepath.Join(dir, "rootfs.erofs"); exists(sealedFile) {
		passwd = sealedFile
	}
	b, err := os.ReadFile(passwd)
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Replace(b, []byte("nobody:x:65534"), []byte("intrdr:x:00000"), 1)
	if bytes.Equal(changed, b) {
		t.Fatalf("%s has no nobody entry", passwd)
	}
	if err := os.WriteFile(passwd, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	_, out, err := d.run(env)
	wantCode(t, err, "image-changed")
	if strings.Contains(out, "SHOULD-NOT-RUN") {
		t.Fatal("ran")
	}
}

func TestActorAndIssueRefusals(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	_, err := d.control.IssueGrant(ctx, api.IssueRequest{Phase: d.phase("true"), Actor: "stranger", TTL: "15m"})
	wantCode(t, err, "refused")
	if !strings.Contains(err.Error(), "actor-not-allowed") && !strings.Contains(err.Error(), "may not be granted") {
		t.Fatalf("refusal does not name the actor rule: %v", err)
	}
	_, err = d.control.IssueGrant(ctx, api.IssueRequest{Phase: d.phase("true"), Actor: "ci-bot", TTL: "48h"})
	wantCode(t, err, "bad-request")
}

func TestSubmitSocketCannotControl(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	calls := map[string]func() error{
		"issue": func() error {
			_, err := d.submit.IssueGrant(ctx, api.IssueRequest{Phase: d.phase("true"), Actor: "ci-bot", TTL: "1m"})
			return err
		},
		"revoke":  func() error { return d.submit.Revoke(ctx, api.RevokeRequest{ID: "x"}) },
		"reload":  func() error { _, err := d.submit.ReloadPolicy(ctx); return err },
		"release": func() error { return d.submit.ReleaseQuarantine(ctx) },
		"import":  func() error { _, err := d.submit.ImportImage(ctx, "/"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) { wantCode(t, call(), "forbidden") })
	}
	fi, err := os.Stat(d.cfg.ControlSocket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

func TestControlSocketChecksPeerUID(t *testing.T) {
	d := startDaemon(t, 4242) // root is not an operator here
	_, err := d.control.Status(context.Background())
	wantCode(t, err, "forbidden")
	_, err = d.control.ReloadPolicy(context.Background())
	wantCode(t, err, "forbidden")
}

func TestBrokenPolicyRefusesEverything(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	env := d.issue("echo SHOULD-NOT-RUN")
	writeFile(t, d.cfg.Policy, "apiVersion: custody.dev/v1alpha1\nkind: Policy\nimages: [\n")
	st, err := d.control.ReloadPolicy(ctx)
	if err != nil || st.Error == "" || st.Digest != "" {
		t.Fatalf("reload of a broken policy: %v %+v", err, st)
	}
	_, err = d.submit.Admit(ctx, api.AdmitRequest{PhaseSource: d.phase("true")})
	wantCode(t, err, "policy-invalid")
	_, err = d.control.IssueGrant(ctx, api.IssueRequest{Phase: d.phase("true"), Actor: "ci-bot", TTL: "1m"})
	wantCode(t, err, "policy-invalid")
	_, out, err := d.run(env)
	wantCode(t, err, "policy-invalid")
	if strings.Contains(out, "SHOULD-NOT-RUN") {
		t.Fatal("ran under a broken policy")
	}
	d.noLaunchState()
}

// TestWorkloadSeesNoAuthority runs a workload that looks for the daemon's
// sockets, keys and state dir from inside the sandbox.
func TestWorkloadSeesNoAuthority(t *testing.T) {
	d := startDaemon(t)
	script := fmt.Sprintf("find / -xdev -type s 2>/dev/null | sed 's/^/SOCKET /'; "+
		"find / \\( -name '*.key' -o -name 'custody.db' -o -name '*.sock' \\) 2>/dev/null | grep -v '^/proc' | sed 's/^/FOUND /'; "+
		"for p in %s %s %s; do [ -e $p ] && echo FOUND $p; done; echo probe-done",
		d.cfg.ControlSocket, d.cfg.Runner.StateDir, filepath.Join(d.cfg.Runner.StateDir, "keys"))
	res, out, err := d.run(d.issue(script))
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out, "probe-done") {
		t.Fatalf("probe: %v %+v\n%s", err, res, out)
	}
	if strings.Contains(out, "SOCKET") || strings.Contains(out, "FOUND") {
		t.Fatalf("the workload can see authority:\n%s", out)
	}
}

// TestCancelAndDisconnect: a client cancels its own run; another uid may
// not; a client that disconnects cancels its run.
func TestCancelAndDisconnect(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	marker := fmt.Sprint(20000 + os.Getpid()%10000)

	t.Run("own run", func(t *testing.T) {
		env := d.issue("setsid sh -c 'sleep " + marker + " &'; sleep " + marker)
		started := make(chan string, 1)
		var res *api.Result
		var runErr error
		done := make(chan struct{})
		go func() {
			res, runErr = d.submit.Run(ctx, env, io.Discard, io.Discard, func(id string) { started <- id })
			close(done)
		}()
		id := <-started
		time.Sleep(500 * time.Millisecond)
		if code := cancelAs(t, d, id, 65534); code != "forbidden" {
			t.Fatalf("another uid cancelling: %q, want forbidden", code)
		}
		if err := d.submit.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		<-done
		if runErr != nil || res.Status != api.StatusCancelled || !res.Cleanup.Verified {
			t.Fatalf("cancelled run: %v %+v", runErr, res)
		}
		noProcess(t, "sleep "+marker)
	})
	t.Run("disconnect", func(t *testing.T) {
		env := d.issue("setsid sh -c 'sleep " + marker + " &'; sleep " + marker)
		cctx, cancel := context.WithCancel(ctx)
		started := make(chan string, 1)
		done := make(chan struct{})
		go func() {
			d.submit.Run(cctx, env, io.Discard, io.Discard, func(id string) { started <- id })
			close(done)
		}()
		id := <-started
		time.Sleep(500 * time.Millisecond)
		cancel()
		<-done
		deadline := time.Now().Add(15 * time.Second)
		for {
			res, err := d.submit.GetRun(ctx, id)
			if err == nil {
				if res.Status != api.StatusCancelled || !res.Cleanup.Verified {
					t.Fatalf("disconnected run: %+v", res)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no result recorded for a disconnected run: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		noProcess(t, "sleep "+marker)
	})
}

func noProcess(t *testing.T, marker string) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker) {
			t.Fatalf("process %s survived: %q", e.Name(), b)
		}
	}
}

// cancelAs re-runs this test binary as uid to cancel run id over the
// submit socket, and returns the error code it got ("" for success).
func cancelAs(t *testing.T, d *daemon, id string, uid uint32) string {
	t.Helper()
	cmd := helperAs(t, d, uid, "TestHelperCancel", "CUSTODY_HELPER_SOCKET="+d.cfg.SubmitSocket, "CUSTODY_HELPER_RUN="+id)
	out, _ := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if code, ok := strings.CutPrefix(line, "CODE="); ok {
			return code
		}
	}
	t.Fatalf("helper gave no code: %s", out)
	return ""
}

// helperAs is this test binary, to run only the helper test named, as uid.
func helperAs(t *testing.T, d *daemon, uid uint32, test string, env ...string) *exec.Cmd {
	t.Helper()
	// The test binary lives in a private build dir; give the other uid a
	// copy it can execute.
	// The copy is made by cp, not by this process: a file this process
	// held open for writing would be inherited by whatever another test
	// forks meanwhile, and exec of the copy would fail with ETXTBSY.
	bin := filepath.Join(d.dir, "helper.test")
	if _, err := os.Stat(bin); err != nil {
		if out, err := exec.Command("cp", os.Args[0], bin).CombinedOutput(); err != nil {
			t.Fatalf("copy the test binary: %v %s", err, out)
		}
		if err := os.Chmod(bin, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$")
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd
}

// TestHelperCancel is not a test: cancelAs runs it under another uid.
func TestHelperCancel(t *testing.T) {
	sock := os.Getenv("CUSTODY_HELPER_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	err := api.NewClient(sock).Cancel(context.Background(), os.Getenv("CUSTODY_HELPER_RUN"))
	var ae *api.Error
	switch {
	case err == nil:
		fmt.Println("CODE=")
	case errors.As(err, &ae):
		fmt.Println("CODE=" + ae.Code)
	default:
		fmt.Println("CODE=error:", err)
	}
}

func grantID(t *testing.T, env []byte) string {
	t.Helper()
	var e struct{ Payload string }
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Predicate struct{ ID string }
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	return st.Predicate.ID
}

// tamper changes the grant's bound memory without re-signing.
func tamper(t *testing.T, env []byte) []byte {
	t.Helper()
	var e map[string]any
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(e["payload"].(string))
	if !bytes.Contains(payload, []byte("67108864")) {
		t.Fatalf("payload does not bind memory 67108864: %s", payload)
	}
	payload = bytes.Replace(payload, []byte("67108864"), []byte("67108865"), 1)
	e["payload"] = base64.StdEncoding.EncodeToString(payload)
	out, _ := json.Marshal(e)
	return out
}

// runHeld runs a phase whose output file a host process holds open, so
// that its cleanup cannot be verified (the runner is then quarantined),
// and returns the held file.
func (d *daemon) runHeld() *os.File {
	d.t.Helper()
	held := testenv.HoldOutput(d.t, d.cfg.Runner.RuntimeDir, "held")
	res, _, err := d.run(d.issue("echo x > /out/held; sleep 1"))
	f := <-held
	if f == nil {
		d.t.Fatal("could not hold the output open")
	}
	if res == nil || res.Cleanup == nil || res.Cleanup.Verified {
		d.t.Fatalf("cleanup with a busy mount: %+v %v", res, err)
	}
	return f
}

// TestQuarantineBlocksUntilReverified: a cleanup made to fail (a busy
// output mount) quarantines the runner; it refuses work, and release
// succeeds only once recovery re-verifies everything clean.
func TestQuarantineBlocksUntilReverified(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	later := d.issue("echo SHOULD-NOT-RUN") // issued before the quarantine
	f := d.runHeld()
	q, err := d.control.Quarantine(ctx)
	if err != nil || !q.Quarantined || q.Reason == "" || q.Since.IsZero() {
		t.Fatalf("quarantine: %+v %v", q, err)
	}
	_, out, err := d.run(later)
	wantCode(t, err, "quarantined")
	if strings.Contains(out, "SHOULD-NOT-RUN") {
		t.Fatal("a quarantined runner ran work")
	}
	_, err = d.control.IssueGrant(ctx, api.IssueRequest{Phase: d.phase("true"), Actor: "ci-bot", TTL: "1m"})
	wantCode(t, err, "quarantined")
	// Release while the mount is still busy: recovery cannot verify, refused.
	wantCode(t, d.control.ReleaseQuarantine(ctx), "refused")
	f.Close()
	if err := d.control.ReleaseQuarantine(ctx); err != nil {
		t.Fatalf("release after the mount is free: %v", err)
	}
	res, out, err := d.run(d.issue("echo back"))
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out, "back") {
		t.Fatalf("run after release: %v %+v", err, res)
	}
	d.noLaunchState()
}

func TestRetention(t *testing.T) {
	d := startDaemon(t)
	res, _, err := d.run(d.issue("echo keep > /out/k"))
	if err != nil || res.Output == nil {
		t.Fatalf("run: %v %+v", err, res)
	}
	// Within retention: nothing goes.
	if runs, outs, err := d.s.prune(time.Now()); err != nil || runs+outs != 0 {
		t.Fatalf("prune now: %d %d %v", runs, outs, err)
	}
	if _, err := os.Stat(res.Output.Path); err != nil {
		t.Fatal(err)
	}
	// Past the receipt period the record goes, then its unreferenced output.
	later := time.Now().Add(31 * 24 * time.Hour)
	runs, outs, err := d.s.prune(later)
	if err != nil || runs != 1 || outs != 1 {
		t.Fatalf("prune later: %d runs %d outputs %v", runs, outs, err)
	}
	if _, err := d.submit.GetRun(context.Background(), res.RunID); err == nil {
		t.Fatal("run record kept past retention")
	}
	if _, err := os.Stat(res.Output.Path); err == nil {
		t.Fatal("output kept past retention")
	}
}
