package integration

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// A custody run whose stdout stopped being read, and whose stream custodyd
// dropped once the run had ended, once exited 0 with part of the output
// and no notice. Now it says its copy is incomplete and where the whole
// kept copy is (custody logs), and exits 3: custody could not deliver
// what it kept. custody logs then prints all of it.
func TestStalledRunSaysItsCopyIsIncomplete(t *testing.T) {
	const size = 16 << 20
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{Config: "submitLimits:\n  stalledClient: 1s\n"})
	g := e.grant(t, e.phase(t, "flood", "head -c 16777216 /dev/zero | tr '\\0' x", ""))

	release := make(chan struct{})
	var mu sync.Mutex
	var out bytes.Buffer
	stalled := writerFunc(func(p []byte) (int, error) {
		<-release
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	})
	var errs testenv.Buffer
	done := make(chan int, 1)
	wait := clitest.Start(t, stalled, &errs, "--control", e.control, "--submit", e.submit, "run", "--grant", g)
	go func() { done <- wait() }()
	started := regexp.MustCompile(`custody: run (\S+) started`)
	var id string
	ctl := api.NewClient(e.control)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if m := started.FindStringSubmatch(errs.String()); id == "" && m != nil {
			id = m[1]
		}
		// The run is on record and its handler has given up on the
		// stalled stream.
		if id != "" {
			if _, err := ctl.GetRun(context.Background(), id); err == nil {
				if st, err := ctl.Status(context.Background()); err == nil && !slices.Contains(st.Running, id) {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("the stalled client's stream was not dropped (run %q)\n%s", id, errs.String())
		}
	}
	close(release)
	code := <-done
	mu.Lock()
	got := out.Len() - len(bytes.TrimLeft(out.Bytes(), "x"))
	mu.Unlock()
	msg := errs.String()
	if code != exitInternal || got >= size || !strings.Contains(msg, "incomplete") || !strings.Contains(msg, "custody logs "+id) {
		t.Fatalf("a stalled client's run: exit %d, %d of %d bytes\n%s", code, got, size, msg)
	}

	// The whole kept copy.
	code, logs, lerrs := e.custody("logs", id)
	if code != exitOK || len(logs) != size || strings.Trim(logs, "x") != "" {
		t.Fatalf("custody logs %s: exit %d, %d bytes\n%s", id, code, len(logs), lerrs)
	}
	// A client that gets all of it exits 0 without a notice (1 MiB: less
	// than custodyd queues for a client, so none is dropped however slow
	// this machine is).
	g = e.grant(t, e.phase(t, "small", "head -c 1048576 /dev/zero | tr '\\0' x", ""))
	if code, whole, werrs := e.custody("run", "--grant", g); code != exitOK || strings.Count(whole, "x") < 1<<20 || strings.Contains(werrs, "incomplete") {
		t.Fatalf("a client that gets every byte: exit %d, %d bytes\n%s", code, len(whole), werrs)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
