package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// The pipeline's test upstreams, inside the namespace egresstest makes:
// the source server (plain HTTP) and the fake provider (TLS) share the
// world's allowed address on ports of their own.
const (
	sourceHost   = egresstest.Allowed + ":8080"
	providerHost = egresstest.Provider + ":8443"
)

// generatedCode is what the fake provider answers a generate request
// with: the program the build stage assembles.
const generatedCode = "greet() { echo \"hello, $1\"; }\n"

// upstreams are the source server and the fake provider, and what they saw.
type upstreams struct {
	mu sync.Mutex
	// provided counts provider requests that carried the credential, and
	// refused those that did not.
	provided, refused int
	// sourceAuth are the Authorization headers the source server got.
	sourceAuth []string
}

// serveUpstreams starts the source server, which serves src at
// /src.tar.gz and answers /private only to the credential, and the fake
// provider, which generates code only for a request carrying it.
func serveUpstreams(t *testing.T, w *egresstest.World, canary string, src []byte) *upstreams {
	t.Helper()
	u := &upstreams{}
	want := "Bearer " + canary
	source := http.NewServeMux()
	source.HandleFunc("/src.tar.gz", func(rw http.ResponseWriter, r *http.Request) { rw.Write(src) })
	source.HandleFunc("/private", func(rw http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.sourceAuth = append(u.sourceAuth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		if r.Header.Get("Authorization") != want {
			http.Error(rw, "unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(rw, "private\n")
	})
	w.Serve(t, net.JoinHostPort(egresstest.AllowedAddr, "8080"), source, false)
	provider := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		defer u.mu.Unlock()
		if r.TLS == nil || r.TLS.ServerName != egresstest.Provider || r.Header.Get("Authorization") != want || r.URL.Path != "/v1/generate" {
			u.refused++
			http.Error(rw, "unauthorized", http.StatusUnauthorized)
			return
		}
		u.provided++
		io.WriteString(rw, generatedCode)
	})
	w.Serve(t, net.JoinHostPort(egresstest.AllowedAddr, "8443"), provider, true)
	return u
}

// sourceTarball is the acquire stage's source: a gzipped tar of one file.
func sourceTarball(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := []byte("pipeline\n")
	if err := tw.WriteHeader(&tar.Header{Name: "name.txt", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// egressDaemon starts custodyd serving restricted egress against w (its
// names, its namespace, its CA) with debug logging, and loads the example
// policy plus the acquire stage's one destination and the provider
// credential bound to generate, whose secret is canary in a 0600 file
// outside the daemon's directories.
func egressDaemon(t *testing.T, w *egresstest.World, canary string) *env {
	t.Helper()
	secrets := t.TempDir()
	ca := w.CAPEM(t, secrets)
	secret := filepath.Join(secrets, "provider-token")
	if err := os.WriteFile(secret, []byte(canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hosts := map[string][]string{}
	for name, as := range w.Resolver {
		for _, a := range as {
			hosts[name] = append(hosts[name], a.String())
		}
	}
	hostsJSON, _ := json.Marshal(hosts)
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{LogLevel: "debug", Config: fmt.Sprintf(
		"egress:\n  caFile: %s\n  testUpstreams:\n    netns: %s\n    hosts: %s\n", ca, w.Netns, hostsJSON)})
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.d.WritePolicy(string(pol) + fmt.Sprintf(`egress:
  stages:
    acquire: [%q]
    generate: [%q]
credentials:
  provider: {file: %s, destination: %q, header: Authorization, format: "Bearer {}", stages: [generate], requests: ["GET /v1/generate"]}
`, sourceHost, sourceHost, secret, providerHost))
	if code, out, errs := e.custody("policy", "reload"); code != exitOK {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	return e
}

// netProbe tries each way out named and writes one line per try to
// /out/net.txt: "refused NAME" when it failed, "REACHED NAME" when it
// got through. It also lists the interfaces the stage has and the
// network variables custody gave it. No wget here takes -T: the test
// image's busybox wget segfaults with it.
const netProbe = `try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "REACHED $n"; else echo "refused $n"; fi; } ; ` +
	`{ try other-host wget -q -O - http://` + egresstest.Other + `:8080/src.tar.gz; ` +
	`try other-port wget -q -O - http://` + egresstest.Allowed + `/; ` +
	`try provider-direct wget -q -O - --header "Authorization: Bearer $CUSTODY_CREDENTIAL_PROVIDER" https://` + providerHost + `/v1/generate; ` +
	`try direct-ip wget -q -Y off -O - http://` + egresstest.AllowedAddr + `:8080/src.tar.gz; ` +
	`try nc sh -c 'echo x | nc -w 2 ` + egresstest.AllowedAddr + ` 8080'; ` +
	`try devtcp sh -c 'echo x > /dev/tcp/` + egresstest.AllowedAddr + `/8080'; ` +
	`try ping ping -c 1 -W 1 ` + egresstest.AllowedAddr + `; ` +
	`try dns nslookup ` + egresstest.Allowed + `; } > /out/net.txt; ` +
	`tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' > /out/ifaces.txt; ` +
	`env | grep -E '^(HTTPS?_PROXY|https?_proxy|NO_PROXY|CUSTODY_)' | sort > /out/netenv.txt; ` +
	`env > /out/env.txt; cat /proc/self/environ > /out/environ.txt; `

// egressStages is the four-stage pipeline of issue 16's done-when:
// acquire fetches the source tarball from the source server through the
// egress proxy (its grant allows exactly that host:port) and checks its
// digest; generate asks the fake provider for code through the
// credential gateway, with only the placeholder in hand; build (network
// denied) assembles the program with busybox tools; the verifier stage
// (network denied) runs hidden acceptance tests only it sees. Every stage
// runs netProbe first.
func egressStages(t *testing.T, e *env, srcDigest string) string {
	t.Helper()
	work := filepath.Join(e.dir, "work")
	write(t, mkdirs(t, filepath.Join(work, "acceptance"), "run-tests.sh"), `#!/bin/sh
# hidden acceptance test: `+acceptanceCanary+`
got=$(/under-test/bin/hello)
if [ "$got" = "hello, pipeline" ]; then echo PASS > /out/result.txt; else echo "FAIL: $got" > /out/result.txt; fi
`)
	acquire := netProbe + `set -e; wget -q -O /tmp/src.tar.gz http://` + sourceHost + `/src.tar.gz; ` +
		`[ "$(sha256sum /tmp/src.tar.gz | cut -d' ' -f1)" = "$SRC_SHA256" ]; ` +
		`mkdir /out/src; tar -xzf /tmp/src.tar.gz -C /out/src; cp /tmp/src.tar.gz /out/`
	generate := netProbe +
		// The placeholder opens nothing on a host the stage may reach.
		`wget -q -O /out/private.txt --header "Authorization: Bearer $CUSTODY_CREDENTIAL_PROVIDER" http://` + sourceHost + `/private || echo refused > /out/private.txt; ` +
		`[ -e /hidden ] && echo "hidden mounted" > /out/hidden.txt; ` +
		`set -e; wget -q -Y off -O /out/greet.sh --header "Authorization: Bearer $CUSTODY_CREDENTIAL_PROVIDER" ` +
		`"$CUSTODY_GATEWAY_PROVIDER/v1/generate?name=$(cat /src/src/name.txt)"`
	build := netProbe + `set -e; mkdir /out/bin; ` +
		`{ echo '#!/bin/sh'; cat /gen/greet.sh; echo "greet \"$(cat /src/src/name.txt)\""; } > /out/bin/hello; ` +
		`sh -n /out/bin/hello; chmod 0755 /out/bin/hello; cd /out/bin; sha256sum hello > hello.sha256`
	test := netProbe + `set -e; cd /under-test/bin; sha256sum -c hello.sha256 > /out/digest.txt; sh /hidden/run-tests.sh`
	doc := "apiVersion: custody.dev/v1alpha1\nkind: Pipeline\nname: egress\nstages:\n" +
		stageYAML(e, "acquire", "acquire", acquire,
			fmt.Sprintf("    env: {SRC_SHA256: %q}\n    network: {egress: [%q]}\n", srcDigest, sourceHost)) +
		stageYAML(e, "generate", "generate", generate,
			fmt.Sprintf("    network: {egress: [%q]}\n    credentials: [provider]\n    inputs:\n      - {from: acquire.output, target: /src}\n", sourceHost)) +
		stageYAML(e, "build", "build", build,
			"    inputs:\n      - {from: acquire.output, target: /src}\n      - {from: generate.output, target: /gen}\n") +
		stageYAML(e, "test", "test", test,
			"    verifier: true\n    inputs:\n      - {from: build.output, target: /under-test}\n      - {source: ./work/acceptance, target: /hidden}\n")
	return e.file(t, "egress-pipeline.yaml", doc)
}

// receiptEgress is the egress part of a stage receipt's predicate.
type receiptEgress struct {
	Allow     []string
	Brokered  []struct{ Name, Destination string }
	Decisions []struct {
		Via, Destination, Code, Credential string
		Allowed                            bool
	}
}

func stageEgress(t *testing.T, run, stage string) (*receiptEgress, []byte) {
	t.Helper()
	payload := payloadOfEnvelope(t, readBytes(t, filepath.Join(run, "receipts", stage+".json")))
	var st struct {
		Predicate struct{ Egress *receiptEgress }
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatalf("stage %s receipt: %v", stage, err)
	}
	return st.Predicate.Egress, payload
}

// TestPipelineEgressStages is issue 16's done-when on the real custodyd
// and runc: acquire from a local test server through the egress proxy,
// generate with a brokered credential against a local fake provider,
// build and test (hidden acceptance tests) with the network denied, each
// stage on its own grant and receipt, and the summary verified. Beside
// it the refusals: acquire reaches no other host, port or address;
// generate's placeholder opens nothing anywhere but through its gateway;
// build and test have no network at all; and a unique canary secret
// reaches the fake provider and appears, in no encoding, in any stage's
// outputs, stdout/stderr, receipts, the pipeline directory, custodyd's
// log or its journal and store files.
func TestPipelineEgressStages(t *testing.T) {
	testenv.Root(t)
	canary := egresstest.Canary(t)
	w := egresstest.NewWorld(t)
	src := sourceTarball(t)
	sum := sha256.Sum256(src)
	up := serveUpstreams(t, w, canary, src)
	e := egressDaemon(t, w, canary)
	trust := e.trust(t, "trust.yaml", "development")
	file := egressStages(t, e, hex.EncodeToString(sum[:]))

	code, out, errs := e.custody("pipeline", "admit", file)
	if code != exitOK || strings.Count(out, ": admitted") != 4 {
		t.Fatalf("pipeline admit: %d\n%s\n%s", code, out, errs)
	}
	run := filepath.Join(e.dir, "egress-run")
	code, runOut, runErrs := e.custody("pipeline", "run", file, "--actor", "operator", "--dir", run)
	st := e.pipelineStatus(t, run)
	if code != exitOK {
		for _, s := range st.Stages {
			if s.RunID != "" {
				_, out, errs := e.custody("logs", s.RunID)
				t.Logf("stage %s output:\n%s%s", s.Name, out, errs)
			}
		}
		t.Fatalf("pipeline run: %d\n%s\n%s", code, runOut, runErrs)
	}
	grants := map[string]bool{}
	for _, s := range st.Stages {
		if s.State != "ok" || s.GrantID == "" || !strings.HasPrefix(s.ReceiptDigest, "sha256:") {
			t.Fatalf("stage %+v", s)
		}
		grants[s.GrantID] = true
	}
	if len(grants) != 4 || st.Summary == "" {
		t.Fatalf("want four distinct grants and a summary: %+v", st)
	}
	code, out, errs = e.custody("verify", filepath.Join(run, "pipeline-summary.json"), "--trust", trust)
	if code != verifyPromotable {
		t.Fatalf("verify summary: %d\n%s\n%s", code, out, errs)
	}

	// Legit: the source came through the proxy intact, the provider gave
	// code for the brokered credential, build assembled it, and the
	// verifier's hidden tests passed on it.
	if got := readOut(t, run, "acquire", "src/name.txt"); got != "pipeline\n" {
		t.Fatalf("acquired source %q", got)
	}
	if got := readOut(t, run, "generate", "greet.sh"); got != generatedCode {
		t.Fatalf("generated code %q", got)
	}
	if got := readOut(t, run, "test", "result.txt"); got != "PASS\n" {
		t.Fatalf("hidden acceptance tests: %q", got)
	}
	if _, err := os.Stat(filepath.Join(run, "outputs", "generate", "hidden.txt")); err == nil {
		t.Fatal("the acceptance material was mounted in generate")
	}
	up.mu.Lock()
	provided, refusedAtProvider, sourceAuth := up.provided, up.refused, append([]string{}, up.sourceAuth...)
	up.mu.Unlock()
	if provided != 1 || refusedAtProvider != 0 {
		t.Fatalf("the provider got %d requests with the credential and %d without, want 1 and 0", provided, refusedAtProvider)
	}

	// Refused: every other way out of every stage.
	for _, stage := range []string{"acquire", "generate", "build", "test"} {
		lines := strings.Split(strings.TrimSpace(readOut(t, run, stage, "net.txt")), "\n")
		if len(lines) != strings.Count(netProbe, "try ") {
			t.Errorf("stage %s tried %d ways out, want each of netProbe's: %q", stage, len(lines), lines)
		}
		for _, line := range lines {
			if !strings.HasPrefix(line, "refused ") {
				t.Errorf("stage %s: %s", stage, line)
			}
		}
		if ifaces := readOut(t, run, stage, "ifaces.txt"); ifaces != "lo\n" {
			t.Errorf("stage %s has interfaces %q, want lo only", stage, ifaces)
		}
	}
	proxyEnv := "HTTPS_PROXY=http://" + egress.ProxyAddr
	for stage, want := range map[string][]string{
		"acquire":  {proxyEnv},
		"generate": {proxyEnv, "CUSTODY_CREDENTIAL_PROVIDER=" + egress.Placeholder, "CUSTODY_GATEWAY_PROVIDER=http://127.0.0.1:"},
		"build":    nil, "test": nil,
	} {
		got := readOut(t, run, stage, "netenv.txt")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("stage %s lacks %s in its env:\n%s", stage, w, got)
			}
		}
		if want == nil && got != "" {
			t.Errorf("stage %s (network denied) was given network variables:\n%s", stage, got)
		}
		if stage != "generate" && strings.Contains(got, "CUSTODY_") {
			t.Errorf("stage %s has a gateway or credential:\n%s", stage, got)
		}
	}
	// The placeholder reached the source server and opened nothing.
	if got := readOut(t, run, "generate", "private.txt"); got != "refused\n" || len(sourceAuth) != 1 || sourceAuth[0] != "Bearer "+egress.Placeholder {
		t.Errorf("the placeholder on another host: got %q, the host saw %q", got, sourceAuth)
	}
	// Nor does it open the provider to anyone calling it directly.
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return w.Dialer.DialContext(ctx, network, net.JoinHostPort(egresstest.AllowedAddr, "8443"))
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: w.CA}}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+providerHost+"/v1/generate", nil)
	req.Header.Set("Authorization", "Bearer "+egress.Placeholder)
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the placeholder at the provider directly: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Per-stage receipts record the egress each stage had: acquire and
	// generate their proxy's and gateway's decisions, build and test none.
	decided := func(eg *receiptEgress, via, dest, code string, allowed bool) bool {
		for _, d := range eg.Decisions {
			if d.Via == via && d.Destination == dest && d.Code == code && d.Allowed == allowed {
				return true
			}
		}
		return false
	}
	acq, _ := stageEgress(t, run, "acquire")
	if acq == nil || len(acq.Allow) != 1 || acq.Allow[0] != sourceHost || len(acq.Brokered) != 0 ||
		!decided(acq, "http", sourceHost, egress.CodeAllowed, true) ||
		!decided(acq, "http", egresstest.Other+":8080", egress.CodeNotAllowlisted, false) ||
		!decided(acq, "http", egresstest.Allowed+":80", egress.CodeNotAllowlisted, false) {
		t.Errorf("acquire receipt egress %+v", acq)
	}
	gen, _ := stageEgress(t, run, "generate")
	if gen == nil || len(gen.Brokered) != 1 || gen.Brokered[0].Name != "provider" || gen.Brokered[0].Destination != providerHost ||
		!decided(gen, "gateway", providerHost, egress.CodeAllowed, true) {
		t.Errorf("generate receipt egress %+v", gen)
	}
	for _, stage := range []string{"build", "test"} {
		if eg, _ := stageEgress(t, run, stage); eg != nil {
			t.Errorf("stage %s (network denied) has egress in its receipt: %+v", stage, eg)
		}
	}

	// Canary: found nowhere. The daemon's directory holds the pipeline
	// directory (outputs, receipts, summary, status), the work tree, the
	// journal and the store; the secret file lives outside it.
	places := map[string][]byte{"pipeline run stdout/stderr": []byte(runOut + runErrs), "custodyd log": []byte(e.d.Logs.String())}
	for _, stage := range []string{"acquire", "generate", "build", "test"} {
		_, payload := stageEgress(t, run, stage)
		places["stage "+stage+" receipt payload"] = payload
		code, out, errs := e.custody("logs", st.Stages[stageIndex(st, stage)].RunID)
		if code != exitOK {
			t.Fatalf("custody logs %s: %d %s", stage, code, errs)
		}
		places["stage "+stage+" stdout/stderr"] = []byte(out + errs)
	}
	filepath.WalkDir(e.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			places["file "+strings.TrimPrefix(p, e.dir)] = b
		}
		return nil
	})
	// The journal is a bucket of the store's database, below state/.
	var state bool
	for where := range places {
		state = state || where == "file /state/custody.db"
	}
	if _, ok := places["file /egress-run/outputs/generate/environ.txt"]; !ok || !state {
		t.Fatalf("the walk missed the stages' outputs (%v) or the store and journal (%v)", ok, state)
	}
	for where, data := range places {
		if leaks := egresstest.Leaks(canary, data); len(leaks) > 0 {
			t.Errorf("the canary leaked into %s: %q", where, leaks)
		}
	}
}

func stageIndex(st statusJSON, name string) int {
	for i, s := range st.Stages {
		if s.Name == name {
			return i
		}
	}
	return -1
}
