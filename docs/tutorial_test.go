package docs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestMain stops the isolated Docker engine the pack tutorial starts.
func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

// block is one shell example of a tutorial and, when the page shows it,
// the output it must give.
type block struct {
	page, section string
	line          int
	script        string
	want          *string
}

var (
	fenceOpen = regexp.MustCompile("^```([a-z]*)\\s*$")
	section   = regexp.MustCompile(`^## +(.+)$`)
)

// tutorialBlocks reads a tutorial's sh blocks in order, each with the
// text block that follows it, if one does before the next sh block.
func tutorialBlocks(t *testing.T, rel string) []block {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var sec string
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		if m := section.FindStringSubmatch(lines[i]); m != nil {
			sec = m[1]
		}
		m := fenceOpen.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		body := strings.Join(lines[start:i], "\n")
		switch m[1] {
		case "sh":
			out = append(out, block{page: rel, section: sec, line: start, script: body})
		case "text":
			if len(out) == 0 || out[len(out)-1].want != nil {
				t.Fatalf("%s:%d: an output block with no shell block before it", rel, start)
			}
			out[len(out)-1].want = &body
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no shell examples", rel)
	}
	return out
}

// TestTutorials runs the first tutorial's shell examples, then the
// pipeline tutorial's, which continues it, in one shell against the real
// custodyd the first one starts, and checks each example's output against
// the page.
func TestTutorials(t *testing.T) {
	testenv.Root(t)
	src := checkout(t)
	first := tutorialBlocks(t, "docs/tutorials/first-phase.md")
	var blocks, stop []block
	for _, b := range first {
		// The first tutorial stops its custodyd last; the pipeline
		// tutorial runs before that.
		if strings.Contains(b.section, "Stop custodyd") {
			stop = append(stop, b)
			continue
		}
		blocks = append(blocks, b)
	}
	if len(stop) != 1 {
		t.Fatalf("the first tutorial has %d blocks that stop custodyd, want 1", len(stop))
	}
	blocks = append(blocks, tutorialBlocks(t, "docs/tutorials/pipeline.md")...)
	blocks = append(blocks, stop...)
	runBlocks(t, src, blocks)
}

// checkout is the directory whose bin/ holds the binaries under test, as
// the tutorials' CUSTODY_SRC.
func checkout(t *testing.T) string {
	t.Helper()
	dir := testenv.ModuleRoot(t)
	if b := os.Getenv("CUSTODY_BIN"); b != "" {
		dir = filepath.Dir(filepath.Dir(b))
	}
	for _, name := range []string{"custody", "custodyd", "custody-runc", "custody-gate"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", name)); err != nil {
			testenv.Missing(t, filepath.Join(dir, "bin", name)+" (make build)")
		}
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		testenv.Missing(t, "/bin/busybox (Debian's busybox-static)")
	}
	return dir
}

const marker = "@@custody-tutorial-block"

// runBlocks runs blocks in one bash, in a fresh directory, and compares
// each one's output (stdout and stderr together) with the page's.
func runBlocks(t *testing.T, src string, blocks []block, env ...string) {
	work := t.TempDir()
	// The sandbox's root, a mapped uid, walks to its launch directory.
	for _, d := range []string{work, filepath.Dir(work)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	var script strings.Builder
	script.WriteString("exec 2>&1\n")
	script.WriteString("trap 'if [ -n \"$CUSTODYD_PID\" ]; then kill $CUSTODYD_PID 2>/dev/null; wait $CUSTODYD_PID 2>/dev/null; fi' EXIT\n")
	for i, b := range blocks {
		// The block's status is taken before the echo that ends its
		// output, which would otherwise be the $? reported.
		fmt.Fprintf(&script, "%s\ncustody_tutorial_status=$?; echo; echo \"%s %d $custody_tutorial_status\"\n", b.script, marker, i)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-s")
	cmd.Dir = work
	cmd.Stdin = strings.NewReader(script.String())
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + work, "LC_ALL=C", "CUSTODY_SRC=" + src}
	cmd.Env = append(cmd.Env, env...)
	// Its own process group: whatever the tutorial left running (its
	// custodyd) is stopped with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout = &out
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
	})
	if err := cmd.Run(); err != nil {
		t.Errorf("the tutorials' shell: %v", err)
	}
	outputs := splitOutputs(t, out.String(), len(blocks))
	for i, b := range blocks {
		o, ok := outputs[i]
		if !ok {
			t.Fatalf("%s:%d (%s): never finished; output so far:\n%s", b.page, b.line, b.section, out.String())
		}
		if o.status != "0" {
			t.Errorf("%s:%d (%s): exit %s:\n%s", b.page, b.line, b.section, o.status, o.text)
			continue
		}
		if b.want != nil && !matchOutput(*b.want, o.text) {
			t.Errorf("%s:%d (%s): output differs from the page.\npage:\n%s\ngot:\n%s", b.page, b.line, b.section, *b.want, o.text)
		}
	}
}

type output struct{ text, status string }

func splitOutputs(t *testing.T, all string, n int) map[int]output {
	t.Helper()
	outs := map[int]output{}
	var cur []string
	for _, line := range strings.Split(all, "\n") {
		var i int
		var status string
		if _, err := fmt.Sscanf(line, marker+" %d %s", &i, &status); err == nil && strings.HasPrefix(line, marker) {
			text := strings.Join(cur, "\n")
			// The marker's leading echo ends a last line that had no newline.
			outs[i] = output{strings.TrimSuffix(text, "\n"), status}
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return outs
}

// placeholder matches a variable part of shown output: <...> is any text,
// another <name> (<digest>, <id>, <path>) one word.
var placeholder = regexp.MustCompile(`<[^<>\s]+>`)

// matchOutput compares output with the page's, line by line, spacing
// aside; a line "..." on the page stands for any number of lines.
func matchOutput(want, got string) bool {
	var pats []*regexp.Regexp
	for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l == "..." {
			pats = append(pats, nil)
			continue
		}
		var re strings.Builder
		re.WriteString("^")
		last := 0
		for _, m := range placeholder.FindAllStringIndex(l, -1) {
			re.WriteString(regexp.QuoteMeta(l[last:m[0]]))
			if l[m[0]:m[1]] == "<...>" {
				re.WriteString(".*")
			} else {
				re.WriteString(`\S+`)
			}
			last = m[1]
		}
		re.WriteString(regexp.QuoteMeta(l[last:]) + "$")
		pats = append(pats, regexp.MustCompile(re.String()))
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	var match func(p, l int) bool
	match = func(p, l int) bool {
		if p == len(pats) {
			return l == len(lines)
		}
		if pats[p] == nil {
			for k := l; k <= len(lines); k++ {
				if match(p+1, k) {
					return true
				}
			}
			return false
		}
		return l < len(lines) && pats[p].MatchString(lines[l]) && match(p+1, l+1)
	}
	return match(0, 0)
}

// TestMatchOutput pins the placeholder convention the tutorials state.
func TestMatchOutput(t *testing.T) {
	want := "run <id> (hello): ok exit 0\n...\n  cleanup verified=true\noutputs FAIL changed file: <...>"
	for got, ok := range map[string]bool{
		"run 99c9 (hello): ok exit 0\nx\ny\ncleanup    verified=true\noutputs FAIL changed file: \"a b\" c": true,
		"run 99c9 (hello): ok exit 0\ncleanup verified=true\noutputs FAIL changed file: x":                  true,
		"run 99c9 (hello): ok exit 1\ncleanup verified=true\noutputs FAIL changed file: x":                  false,
		"run 9 9 (hello): ok exit 0\ncleanup verified=true\noutputs FAIL changed file: x":                   false,
		"run 99c9 (hello): ok exit 0\ncleanup verified=true":                                                false,
		"run 99c9 (hello): ok exit 0\ncleanup verified=true\noutputs FAIL changed file: x\nmore":            false,
	} {
		if matchOutput(want, got) != ok {
			t.Errorf("matchOutput(%q) = %v, want %v", got, !ok, ok)
		}
	}
}

// TestPackTutorial runs the first tutorial's set-up (its steps 1 to 3),
// then the scenario pack tutorial's examples against that custodyd and the
// test binary's isolated Docker engine, then stops custodyd.
func TestPackTutorial(t *testing.T) {
	testenv.Root(t)
	src := checkout(t)
	engine := dockertest.Shared(t)
	blocks, stop := firstPhaseSetup(t, 3)
	blocks = append(blocks, tutorialBlocks(t, "docs/tutorials/scenario-pack.md")...)
	blocks = append(blocks, stop...)
	runBlocks(t, src, blocks, "ENGINE="+engine.Host, "PACK_IMAGE="+dockertest.ImageRef)
}

// TestAgentTutorial runs the first tutorial's set-up (its steps 1 to 4),
// then the coding agent tutorial's examples against that custodyd, as root
// for the operator and as a second uid for the agent, then stops custodyd.
func TestAgentTutorial(t *testing.T) {
	testenv.Root(t)
	src := checkout(t)
	for tool, pkg := range map[string]string{"setpriv": "util-linux", "jq": "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool+" (Debian's "+pkg+")")
		}
	}
	// The agent's uid runs the checkout's custody, as it would an
	// installed one.
	custody := filepath.Join(src, "bin", "custody")
	if err := exec.Command("setpriv", "--reuid=1500", "--regid=1500", "--clear-groups", "test", "-x", custody).Run(); err != nil {
		testenv.Missing(t, custody+" runnable by uid 1500 (a checkout every user may read and traverse)")
	}
	blocks, stop := firstPhaseSetup(t, 4)
	blocks = append(blocks, tutorialBlocks(t, "docs/tutorials/coding-agent.md")...)
	blocks = append(blocks, stop...)
	runBlocks(t, src, blocks)
}

// firstPhaseSetup is the first tutorial's blocks of its steps 1 to last
// (the set-up a later tutorial starts from), and its block that stops
// custodyd, to run after that tutorial.
func firstPhaseSetup(t *testing.T, last int) (setup, stop []block) {
	t.Helper()
	for _, b := range tutorialBlocks(t, "docs/tutorials/first-phase.md") {
		var step int
		if _, err := fmt.Sscanf(b.section, "%d.", &step); err != nil {
			continue
		}
		switch {
		case strings.Contains(b.section, "Stop custodyd"):
			stop = append(stop, b)
		case step <= last:
			setup = append(setup, b)
		}
	}
	if len(stop) != 1 {
		t.Fatalf("the first tutorial has %d blocks that stop custodyd, want 1", len(stop))
	}
	return setup, stop
}
