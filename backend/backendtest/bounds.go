package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
)

// The requirements of the reviewed profile a sandbox enforces, by the name
// a backend's Capabilities.Controls gap carries when it cannot enforce one
// (the Fake, which runs its workload as a plain host process, reports
// each). A backend that reports no such gap claims the control, and the
// suite breaks it with a workload that would pass without it.
const (
	ControlMemory        = "sandbox.memory"
	ControlPids          = "sandbox.pids"
	ControlOutputBytes   = "sandbox.output-bytes"
	ControlTmpBytes      = "sandbox.tmp-bytes"
	ControlRootfsRO      = "sandbox.rootfs-read-only"
	ControlInputsRO      = "sandbox.inputs-read-only"
	ControlDeniedEgress  = "sandbox.denied-egress"
	ControlEnvIsDeclared = "sandbox.env-declared-only"
	ControlFileSize      = "sandbox.file-size"
	ControlIdentity      = "sandbox.identity"
)

// claims says whether the backend claims control: true unless one of its
// Controls gaps, or its production tier's, names it. A gap must say why and how to fix it; the
// refusal half of a case whose control is not claimed is reported, loudly,
// as not claimed, since admission refuses every launch under that gap.
func claims(t *testing.T, f Fixture, control string) bool {
	t.Helper()
	caps := f.Backend.Capabilities()
	// A gap of the production tier alone (the development tier, labelled
	// unqualified, runs without the control) is not a claim either.
	gaps := append(slices.Clone(caps.Controls), caps.Tiers["production"]...)
	switch control {
	case ControlDeniedEgress:
		gaps = append(gaps, caps.DeniedEgressGaps...)
	case ControlInputsRO:
		gaps = append(gaps, caps.InputGaps...)
	}
	for _, g := range gaps {
		if g.Requirement != control && !(control == ControlDeniedEgress && slices.Contains(caps.DeniedEgressGaps, g)) &&
			!(control == ControlInputsRO && slices.Contains(caps.InputGaps, g)) {
			continue
		}
		if g.Code == "" || g.Detail == "" || g.Fix == "" {
			t.Errorf("the gap for %s does not say why and how to fix it: %+v", control, g)
		}
		t.Logf("NOT CLAIMED: %s does not claim %s (%s: %s); admission refuses every launch on it, so only the legitimate half runs",
			f.Backend.Name(), control, g.Code, g.Detail)
		return false
	}
	return true
}

// shSpec is the fixture's Spec running script in /bin/sh, with @OUT@
// standing for the Spec's output path.
func shSpec(f Fixture, script string) backend.Spec {
	s := f.Spec("/bin/sh", "-c", script)
	s.Args = []string{"/bin/sh", "-c", strings.ReplaceAll(script, "@OUT@", s.OutputPath)}
	return s
}

// ran is one finished launch, its sandbox cleaned up and verified.
type ran struct {
	exit           *backend.Exit
	stdout, stderr string
	used           int64
	files          map[string]string
}

// runSpec prepares s, runs it to the end within wall, reads its output and
// cleans up (verified).
func runSpec(t *testing.T, f Fixture, s backend.Spec, wall time.Duration) ran {
	t.Helper()
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	sb := prepare(t, f, id, s, j)
	var stdout, stderr bytes.Buffer
	ex, err := sb.Run(ctx, wall, backend.IO{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		sb.Cleanup(ctx)
		t.Fatalf("run: %v", err)
	}
	r := ran{exit: ex, stdout: stdout.String(), stderr: stderr.String(), files: map[string]string{}}
	r.used, err = sb.Output().Used()
	if err != nil {
		t.Errorf("output used: %v", err)
	}
	_ = filepath.Walk(sb.Output().Dir(), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && info.Size() < 1<<20 {
			rel, _ := filepath.Rel(sb.Output().Dir(), p)
			data, _ := os.ReadFile(p)
			r.files[rel] = string(data)
		}
		return nil
	})
	wantVerified(t, "cleanup", sb.Cleanup(ctx))
	j.check(t)
	return r
}

func runSh(t *testing.T, f Fixture, script string) ran {
	t.Helper()
	return runSpec(t, f, shSpec(f, script), 2*time.Minute)
}

func (r ran) wantClean(t *testing.T, what string) {
	t.Helper()
	if e := r.exit; e.Code != 0 || e.Signal != "" || e.TimedOut || e.Cancelled || e.OOMKilled || e.CodeUnobserved {
		t.Errorf("%s: exit %+v, want a clean exit 0; stdout %q stderr %q", what, e, r.stdout, r.stderr)
	}
}

// memoryBound: a workload well inside the memory budget runs; one that
// touches four times it is killed, and the exit says out of memory.
func memoryBound(t *testing.T, f Fixture) {
	mem := f.Spec("/bin/true").Memory
	if mem <= 0 || mem > 256<<20 {
		t.Fatalf("the fixture's memory budget %d is not a modest bound", mem)
	}
	// dd's block is one buffer it fills from /dev/zero: every page touched.
	small := runSh(t, f, fmt.Sprintf("dd if=/dev/zero of=/dev/null bs=%d count=1 2>/dev/null && echo allocated", mem/8))
	small.wantClean(t, "an eighth of the memory budget")
	if small.stdout != "allocated\n" {
		t.Errorf("an eighth of the memory budget: stdout %q", small.stdout)
	}
	if !claims(t, f, ControlMemory) {
		return
	}
	big := runSh(t, f, fmt.Sprintf("dd if=/dev/zero of=/dev/null bs=%d count=1 && echo UNBOUNDED", 4*mem))
	if strings.Contains(big.stdout, "UNBOUNDED") || big.exit.Code == 0 && big.exit.Signal == "" {
		t.Errorf("four times the memory budget (%d) was allocated: exit %+v", mem, big.exit)
	}
	// The bound holds either way: the allocation is refused outright (a
	// VM guest whose whole memory is the budget), or touching it gets the
	// workload killed, which the exit must then say.
	refused := big.exit.Code != 0 && !big.exit.OOMKilled && strings.Contains(strings.ToLower(big.stderr), "memory")
	if !big.exit.OOMKilled && !refused {
		t.Errorf("exit %+v, stderr %q: a workload stopped by the memory bound is reported OOMKilled, or its allocation refused", big.exit, big.stderr)
	}
	if refused {
		t.Logf("the allocation was refused: %q", strings.TrimSpace(big.stderr))
	}
}

// pidsBound: a workload with a few processes runs them all; one that holds
// Pids+32 processes at once cannot start them all. The children block
// reading a fifo they inherit already open (never opening it themselves: a
// child that had not reached its open when the parent released the others
// would block on the open for good, holding the run's stdout), and the
// parent writes one line for each child it tried to start, so nothing
// depends on timing.
func pidsBound(t *testing.T, f Fixture) {
	pids := f.Spec("/bin/true").Pids
	if pids <= 0 || pids > 256 {
		t.Fatalf("the fixture's pids budget %d is not a modest bound", pids)
	}
	script := func(n int64) string {
		return fmt.Sprintf(`d=$(mktemp -d); mkfifo $d/go; exec 3<>$d/go
( i=0; while [ $i -lt %[1]d ]; do i=$((i+1)); ( read x <&3 ) & done; echo ALL-STARTED ) 2>/dev/null
i=0; while [ $i -lt %[1]d ]; do i=$((i+1)); echo; done >&3; wait; rm -rf $d; exit 0`, n)
	}
	few := runSh(t, f, script(8))
	few.wantClean(t, "8 processes")
	if !strings.Contains(few.stdout, "ALL-STARTED") {
		t.Errorf("8 processes under a pids budget of %d did not all start: %q %q", pids, few.stdout, few.stderr)
	}
	if !claims(t, f, ControlPids) {
		return
	}
	many := runSh(t, f, script(pids+32))
	if strings.Contains(many.stdout, "ALL-STARTED") {
		t.Errorf("%d processes held at once under a pids budget of %d all started", pids+32, pids)
	}
}

// outputBound: output within its bytes (and files, when bounded) is kept;
// writing past either is refused, and what is held stays within the bound.
func outputBound(t *testing.T, f Fixture) {
	s := f.Spec("/bin/true")
	bs := int64(64 << 10)
	ok := runSh(t, f, fmt.Sprintf("dd if=/dev/zero of=@OUT@/quarter bs=%d count=%d 2>/dev/null && echo wrote", bs, s.OutputBytes/4/bs))
	ok.wantClean(t, "a quarter of the output budget")
	if ok.stdout != "wrote\n" || ok.used < s.OutputBytes/4/bs*bs {
		t.Errorf("a quarter of the output budget: stdout %q, %d bytes used", ok.stdout, ok.used)
	}
	if !claims(t, f, ControlOutputBytes) {
		return
	}
	over := runSh(t, f, fmt.Sprintf("dd if=/dev/zero of=@OUT@/big bs=%d count=%d 2>/dev/null && echo UNBOUNDED; exit 0", bs, 2*s.OutputBytes/bs))
	if strings.Contains(over.stdout, "UNBOUNDED") {
		t.Errorf("twice the output budget (%d bytes) was written", s.OutputBytes)
	}
	if over.used > s.OutputBytes+bs {
		t.Errorf("the output holds %d bytes, past its bound %d", over.used, s.OutputBytes)
	}
	if s.OutputFiles <= 0 {
		t.Logf("the fixture's Spec bounds no output file count (OutputFiles 0): the file bound is not exercised")
		return
	}
	// touch, not a redirection: a shell exits on a failed redirection.
	files := runSh(t, f, fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); touch @OUT@/f$i 2>/dev/null || { echo REFUSED; break; }; done; exit 0`, s.OutputFiles+16))
	if !strings.Contains(files.stdout, "REFUSED") {
		t.Errorf("%d files were made under an output file bound of %d", s.OutputFiles+16, s.OutputFiles)
	}
}

// tmpBound: /tmp takes writes within the tmp budget and refuses writes
// past it.
func tmpBound(t *testing.T, f Fixture) {
	tmp := f.Spec("/bin/true").TmpBytes
	bs := int64(64 << 10)
	if tmp < 4*bs || tmp > 64<<20 {
		t.Fatalf("the fixture's tmp budget %d is not a modest bound of at least 256 KiB", tmp)
	}
	ok := runSh(t, f, fmt.Sprintf(`d=$(mktemp -d) && dd if=/dev/zero of=$d/quarter bs=%d count=%d 2>/dev/null && echo wrote; rm -rf "$d"`, bs, tmp/4/bs))
	ok.wantClean(t, "a quarter of the tmp budget")
	if ok.stdout != "wrote\n" {
		t.Errorf("a quarter of the tmp budget: stdout %q stderr %q", ok.stdout, ok.stderr)
	}
	if !claims(t, f, ControlTmpBytes) {
		return
	}
	over := runSh(t, f, fmt.Sprintf(`dd if=/dev/zero of=/tmp/big bs=%d count=%d 2>/dev/null && echo UNBOUNDED; exit 0`, bs, 2*tmp/bs))
	if strings.Contains(over.stdout, "UNBOUNDED") {
		t.Errorf("twice the tmp budget (%d bytes) was written to /tmp", tmp)
	}
}

// rootfsReadOnly: the workload writes its output, and cannot write its
// root filesystem; the image on the host is unchanged.
func rootfsReadOnly(t *testing.T, f Fixture) {
	s := f.Spec("/bin/true")
	probe := fmt.Sprintf("custody-suite-probe-%d", time.Now().UnixNano())
	if !claims(t, f, ControlRootfsRO) {
		r := runSh(t, f, "echo kept > @OUT@/ok")
		r.wantClean(t, "an output write")
		return
	}
	r := runSh(t, f, fmt.Sprintf(`echo kept > @OUT@/ok; for p in /%[1]s /bin/%[1]s /etc/%[1]s; do echo x > $p 2>/dev/null && echo WROTE $p; done; exit 0`, probe))
	r.wantClean(t, "the probe")
	if r.files["ok"] != "kept\n" {
		t.Errorf("the legitimate output write: %q", r.files["ok"])
	}
	if strings.Contains(r.stdout, "WROTE") {
		t.Errorf("the root filesystem took writes: %s", r.stdout)
	}
	for _, d := range []string{"", "bin", "etc"} {
		if _, err := os.Lstat(filepath.Join(s.Rootfs, d, probe)); err == nil {
			t.Errorf("the image on the host was written: %s", filepath.Join(s.Rootfs, d, probe))
		}
	}
}

// inputsReadOnly: an input is readable at its target and refuses writes;
// its host tree is unchanged.
func inputsReadOnly(t *testing.T, f Fixture) {
	src := inputDir(t, "input\n")
	script := `cat /in/in.txt > @OUT@/copy; echo x > /in/in.txt 2>/dev/null && echo WROTE; echo x > /in/new 2>/dev/null && echo MADE; exit 0`
	s := shSpec(f, script)
	s.Inputs = []backend.Mount{{Source: src, Target: "/in"}}
	if !claims(t, f, ControlInputsRO) {
		s = shSpec(f, "cat /in/in.txt > @OUT@/copy")
		s.Inputs = []backend.Mount{{Source: src, Target: "/in"}}
		r := runSpec(t, f, s, 2*time.Minute)
		r.wantClean(t, "reading the input")
		if r.files["copy"] != "input\n" {
			t.Errorf("the input read in the sandbox: %q (stderr %q)", r.files["copy"], r.stderr)
		}
		return
	}
	r := runSpec(t, f, s, 2*time.Minute)
	r.wantClean(t, "the probe")
	if r.files["copy"] != "input\n" {
		t.Errorf("the input read in the sandbox: %q, want %q (stderr %q)", r.files["copy"], "input\n", r.stderr)
	}
	if strings.Contains(r.stdout, "WROTE") || strings.Contains(r.stdout, "MADE") {
		t.Errorf("a read-only input took writes: %s", r.stdout)
	}
	if data, err := os.ReadFile(filepath.Join(src, "in.txt")); err != nil || string(data) != "input\n" {
		t.Errorf("the input on the host changed: %q %v", data, err)
	}
	if _, err := os.Lstat(filepath.Join(src, "new")); err == nil {
		t.Error("a file appeared in the input on the host")
	}
}

// ambientVar is set in the test process: no sandbox may see it.
const ambientVar = "CUSTODY_SUITE_AMBIENT"

// envExactlyDeclared: the workload sees its declared variables, and none
// of the environment of whoever launched it.
func envExactlyDeclared(t *testing.T, f Fixture) {
	t.Setenv(ambientVar, "leaked")
	s := shSpec(f, `env > @OUT@/env`)
	s.Env = append(append([]string{}, s.Env...), "SUITE_DECLARED=yes")
	r := runSpec(t, f, s, 2*time.Minute)
	r.wantClean(t, "env")
	seen := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.files["env"]), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			seen[k] = v
		}
	}
	if seen["SUITE_DECLARED"] != "yes" {
		t.Errorf("the declared variable is missing: env %q", r.files["env"])
	}
	if !claims(t, f, ControlEnvIsDeclared) {
		return
	}
	declared := map[string]bool{}
	for _, kv := range s.Env {
		k, _, _ := strings.Cut(kv, "=")
		declared[k] = true
	}
	// The shell itself sets these.
	for _, k := range []string{"PWD", "SHLVL", "_", "OLDPWD"} {
		declared[k] = true
	}
	for k, want := range f.EnvAdded {
		if v, ok := seen[k]; ok && !declared[k] {
			if v != want {
				t.Errorf("the engine adds %s=%s, want its fixed value %q", k, v, want)
			}
			t.Logf("the engine adds %s=%s (declared by the fixture as the engine's own)", k, v)
			declared[k] = true
		}
	}
	for k, v := range seen {
		if !declared[k] {
			t.Errorf("the workload sees %s=%s, which the Spec does not declare", k, v)
		}
	}
	if _, ok := seen[ambientVar]; ok {
		t.Errorf("the launcher's environment reached the workload: %s", ambientVar)
	}
}

// usageReadBack: the limits a Usage reports are read back from the live
// sandbox, so for a workload alive long enough to be observed they are the
// Spec's budgets (a backend's own overhead above them at most), or -1
// where the backend did not observe them: never 0 or "unlimited" for a
// limit that was enforced. The peak and CPU time are observed or -1.
func usageReadBack(t *testing.T, f Fixture) {
	// One workload alive long enough to be observed, one that may be
	// gone before it is: what was not read must say so.
	for _, script := range []string{"sleep 2; echo done", "echo done"} {
		usageOf(t, f, script)
	}
}

func usageOf(t *testing.T, f Fixture, script string) {
	s := shSpec(f, script)
	r := runSpec(t, f, s, 2*time.Minute)
	r.wantClean(t, script)
	u := r.exit.Usage
	t.Logf("usage %+v for memory %d, pids %d", u, s.Memory, s.Pids)
	within := func(name string, got, budget, slack int64) {
		switch {
		case got == -1:
			t.Logf("NOT OBSERVED: %s reports no %s read back", f.Backend.Name(), name)
		case got < budget || got > budget+slack:
			t.Errorf("the %s read back is %d, for a budget of %d: not what was enforced", name, got, budget)
		}
	}
	if !claims(t, f, ControlMemory) {
		if u.MemoryLimitBytes != -1 {
			t.Errorf("a backend that does not enforce memory reports a memory limit of %d", u.MemoryLimitBytes)
		}
	} else {
		within("memory limit", u.MemoryLimitBytes, s.Memory, 1<<30)
	}
	if !claims(t, f, ControlPids) {
		if u.PidsLimit != -1 {
			t.Errorf("a backend that does not enforce pids reports a pids limit of %d", u.PidsLimit)
		}
	} else {
		within("pids limit", u.PidsLimit, s.Pids, 4096)
	}
	if u.PeakMemoryBytes == 0 || u.PeakMemoryBytes < -1 {
		t.Errorf("peak memory %d: a peak is observed (> 0) or -1", u.PeakMemoryBytes)
	}
	if u.CPUTimeNanos < -1 {
		t.Errorf("cpu time %d: observed (>= 0) or -1", u.CPUTimeNanos)
	}
}

// exitStatus: the workload's own exit code is reported as it is, whatever
// the workload prints about it, and not as a kill by the sandbox.
func exitStatus(t *testing.T, f Fixture) {
	for _, c := range []struct {
		script string
		code   int
	}{{"echo 'exit code 0' >&2; exit 7", 7}, {"sleep 60 & kill -KILL $!; wait $!", 137}} {
		r := runSh(t, f, c.script)
		if e := r.exit; e.Code != c.code || e.Signal != "" || e.CodeUnobserved || e.TimedOut || e.Cancelled || e.OOMKilled {
			t.Errorf("%q reported as %+v, want exit code %d", c.script, e, c.code)
		}
	}
}

// fileSizeBound: a file within the file size budget is written; one past
// it is refused. The budget is set to half the output bound, so that only
// the size limit, not the output filesystem, can stop the second.
func fileSizeBound(t *testing.T, f Fixture) {
	bs := int64(4096)
	spec := func(script string) backend.Spec {
		s := shSpec(f, script)
		s.FileSize = s.OutputBytes / 2 / bs * bs
		return s
	}
	budget := spec("").FileSize
	ok := runSpec(t, f, spec(fmt.Sprintf("dd if=/dev/zero of=@OUT@/small bs=%d count=%d 2>/dev/null && echo wrote", bs, budget/2/bs)), 2*time.Minute)
	ok.wantClean(t, "a file of half the file size budget")
	if ok.stdout != "wrote\n" {
		t.Errorf("a file of half the file size budget: %q %q", ok.stdout, ok.stderr)
	}
	if !claims(t, f, ControlFileSize) {
		return
	}
	// Past the limit a write fails (EFBIG) or the writer gets SIGXFSZ.
	over := runSpec(t, f, spec(fmt.Sprintf(`dd if=/dev/zero of=@OUT@/big bs=%d count=%d 2>/dev/null && echo UNBOUNDED; exit 0`, bs, budget/bs+2)), 2*time.Minute)
	if strings.Contains(over.stdout, "UNBOUNDED") {
		t.Errorf("a file past the file size budget (%d bytes) was written", budget)
	}
	if n := int64(len(over.files["big"])); n > budget {
		t.Errorf("the output holds a %d-byte file, past the file size budget %d", n, budget)
	}
}

// identityAndPlace: the workload runs as the Spec's user and group, in its
// working directory, under its hostname; as that user it cannot read a
// root-only input.
func identityAndPlace(t *testing.T, f Fixture) {
	src := inputDir(t, "public\n")
	if err := os.WriteFile(filepath.Join(src, "secret"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := shSpec(f, `echo "$(id -u):$(id -g) $(pwd) $(hostname)"; cat /in/in.txt; cat /in/secret 2>/dev/null && echo READ-SECRET; exit 0`)
	s.UID, s.GID, s.Cwd = 1000, 1000, "/in"
	s.Inputs = []backend.Mount{{Source: src, Target: "/in"}}
	if !claims(t, f, ControlIdentity) {
		s.UID, s.GID, s.Cwd = 0, 0, "/"
		r := runSpec(t, f, s, 2*time.Minute)
		if !strings.Contains(r.stdout, "public\n") {
			t.Errorf("the input read by the workload: %q %q", r.stdout, r.stderr)
		}
		return
	}
	r := runSpec(t, f, s, 2*time.Minute)
	r.wantClean(t, "the identity probe")
	want := fmt.Sprintf("1000:1000 /in %s\npublic\n", s.Hostname)
	if r.stdout != want {
		t.Errorf("the workload reports %q, want %q (stderr %q)", r.stdout, want, r.stderr)
	}
}
