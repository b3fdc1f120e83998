package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/platform"
)

func doctor(t *testing.T, args ...string) (int, doctorJSON, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"doctor", "--json"}, args...), &out, &errb)
	var rep doctorJSON
	if code == exitOK || code == exitFailed {
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("doctor %v: %v\n%s", args, err, out.String())
		}
	}
	return code, rep, errb.String()
}

type doctorJSON struct {
	Kernel string
	Checks []platform.Check
	OK     bool
}

func (r doctorJSON) check(t *testing.T, name string) platform.Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", name, r.Checks)
	return platform.Check{}
}

// TestDoctorOnThisHost runs custody doctor against the real host: with
// custodyd.yaml pinning the real runc every fact gets a verdict in the same
// order every time, a tier this host can run is named, and it exits 0; a
// runtime that differs from the pin, a missing runtime, or an engine that
// does not answer is reported with its fix (exit 1 for the first two), and
// an unreadable config or a bad flag is refused or a usage error.
func TestDoctorOnThisHost(t *testing.T) {
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	dir := t.TempDir()
	cfg := func(name, sha string, docker *config.DockerConfig) string {
		p := filepath.Join(dir, name)
		writeCustodydConfig(t, p, config.Config{Runner: config.Runner{StateDir: "/var/lib/custody",
			Runtime: config.Runtime{Path: path, Version: version, SHA256: sha}}, Docker: docker})
		return p
	}
	good := cfg("good.yaml", sha, nil)
	code, rep, errs := doctor(t, "--config", good)
	if code != exitOK || !rep.OK || rep.Kernel == "" {
		t.Fatalf("doctor --config good: %d %s %+v", code, errs, rep)
	}
	if c := rep.check(t, "runtime"); c.Verdict != platform.VerdictOK || !bytes.Contains([]byte(c.Detail), []byte("the pinned digest")) {
		t.Fatalf("runtime check %+v", c)
	}
	var names []string
	runnable := false
	for _, c := range rep.Checks {
		names = append(names, c.Name)
		if c.Verdict == "" || c.Detail == "" || (c.Verdict != platform.VerdictOK && c.Fix == "") {
			t.Fatalf("check without verdict, detail or fix: %+v", c)
		}
		runnable = runnable || (len(c.Name) > 5 && c.Name[:5] == "tier." && c.Verdict == platform.VerdictOK)
	}
	if !runnable {
		t.Fatalf("no tier runnable on a host that runs the suite: %+v", rep.Checks)
	}
	want := []string{"runtime", "seccomp", "tmpfs", "overlay", "userns", "idmap", "pidfd-netns", "openat2", "cgroup.mode", "cgroup.v2.delegated",
		"cgroup.v1.usable", "tier.production", "tier.development", "docker.engine", "images.sealed"}
	if !slices.Equal(names, want) {
		t.Fatalf("checks %v, want %v", names, want)
	}
	for range 2 { // the same order every run
		if _, again, _ := doctor(t, "--config", good); !slices.EqualFunc(again.Checks, rep.Checks, func(a, b platform.Check) bool { return a.Name == b.Name }) {
			t.Fatalf("order changed: %+v", again.Checks)
		}
	}

	// A runtime that is not the pinned one fails, naming both digests.
	code, rep, _ = doctor(t, "--config", cfg("moved.yaml", "0000000000000000000000000000000000000000000000000000000000000000", nil))
	if c := rep.check(t, "runtime"); code != exitFailed || rep.OK || c.Verdict != platform.VerdictFail || c.Fix == "" {
		t.Fatalf("pin mismatch: %d %+v", code, c)
	}
	code, rep, _ = doctor(t, "--runtime", filepath.Join(dir, "nonexistent"))
	if c := rep.check(t, "runtime"); code != exitFailed || c.Verdict != platform.VerdictFail {
		t.Fatalf("--runtime nonexistent: %d %+v", code, c)
	}
	// A configured engine that does not answer: packs are refused, phases run.
	code, rep, _ = doctor(t, "--config", cfg("docker.yaml", sha, &config.DockerConfig{Host: "unix://" + filepath.Join(dir, "none.sock")}))
	if c := rep.check(t, "docker.engine"); code != exitOK || c.Verdict != platform.VerdictWarn || c.Fix == "" {
		t.Fatalf("engine down: %d %+v", code, c)
	}
	// An engine that answers, without a probe image: the egress proof
	// cannot run, and doctor says so and how to fix it; with one, ok.
	sock := filepath.Join(dir, "ping.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Api-Version", "1.41") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	code, rep, _ = doctor(t, "--config", cfg("noimage.yaml", sha, &config.DockerConfig{Host: "unix://" + sock}))
	if c := rep.check(t, "docker.engine"); code != exitOK || c.Verdict != platform.VerdictWarn || !strings.Contains(c.Detail, "docker.probeImage is not set") || !strings.Contains(c.Fix, "probeImage") {
		t.Fatalf("engine without a probe image: %d %+v", code, c)
	}
	code, rep, _ = doctor(t, "--config", cfg("image.yaml", sha, &config.DockerConfig{Host: "unix://" + sock, ProbeImage: "busybox:local"}))
	if c := rep.check(t, "docker.engine"); code != exitOK || c.Verdict != platform.VerdictOK {
		t.Fatalf("engine with a probe image: %d %+v", code, c)
	}
	if code, _, _ := doctor(t, "--config", dir); code != exitRefused {
		t.Fatalf("--config DIR: %d, want %d", code, exitRefused)
	}
	if code, _, _ := doctor(t, "--bogus"); code != exitUsage {
		t.Fatalf("--bogus: %d, want %d", code, exitUsage)
	}
}

// writeCustodydConfig writes c as custodyd.yaml at path.
func writeCustodydConfig(t *testing.T, path string, c config.Config) {
	t.Helper()
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, string(data))
}
