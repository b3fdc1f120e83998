package daemon

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/runrecord"
)

// floodScript writes 24 MiB of zeros to stdout (past the runner's 16 MiB
// stream cap) and 1 MiB of 'e' to stderr.
const floodScript = "dd if=/dev/zero bs=1048576 count=24 2>/dev/null; head -c 1048576 /dev/zero | tr '\\0' e >&2"

// floodStreams is what the runner records of floodScript's streams.
func floodStreams() api.Streams {
	return api.Streams{
		Stdout: api.StreamDigest{SHA256: sumOf(make([]byte, host.StreamCap)), Bytes: host.StreamCap, Truncated: true},
		Stderr: api.StreamDigest{SHA256: sumOf(bytes.Repeat([]byte("e"), 1<<20)), Bytes: 1 << 20},
	}
}

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// rawRun submits env over a raw connection and reads only the stream's
// first event (started); the caller decides whether to read on.
func rawRun(t *testing.T, d *daemon, env []byte) (net.Conn, *json.Decoder, string) {
	t.Helper()
	conn, err := net.Dial("unix", d.cfg.SubmitSocket)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(api.RunRequest{Grant: env})
	req, _ := http.NewRequest(http.MethodPost, "http://custodyd/v1/runs", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	// Small buffers: reading the first event must not drain the socket.
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("run: %v %v", err, resp)
	}
	dec := json.NewDecoder(resp.Body)
	var ev api.Event
	if err := dec.Decode(&ev); err != nil || ev.Type != api.EventStarted {
		t.Fatalf("first event: %+v %v", ev, err)
	}
	return conn, dec, ev.RunID
}

// waitRecord polls the control socket until run id has a record.
func waitRecord(t *testing.T, d *daemon, id string, within time.Duration) *api.Result {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		res, err := d.control.GetRun(context.Background(), id)
		if err == nil {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result recorded for run %s within %s: %v", id, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSlowClientDoesNotHoldTheRun: a client that stops reading its stream
// while the workload writes tens of MiB changes nothing about the run: it
// ends on its own, cleanup is verified, the runner is not quarantined, and
// the result's stream digests are those of what the workload wrote. The
// client, reading again, is told what its stream left out.
func TestSlowClientDoesNotHoldTheRun(t *testing.T) {
	d := startDaemon(t)
	conn, dec, id := rawRun(t, d, d.issue(floodScript))
	defer conn.Close()
	// The client reads nothing more until the run is on record.
	res := waitRecord(t, d, id, 25*time.Second)
	if res.Status != api.StatusOK || res.Cleanup == nil || !res.Cleanup.Verified {
		t.Fatalf("run behind a stalled client: %+v", res)
	}
	if q, err := d.control.Quarantine(context.Background()); err != nil || q.Quarantined {
		t.Fatalf("quarantine after a stalled client: %+v %v", q, err)
	}
	if want := floodStreams(); res.Streams == nil || *res.Streams != want {
		t.Fatalf("streams = %+v, want %+v", res.Streams, want)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.cfg.Runner.StateDir, "spool")); len(ents) != 0 {
		t.Fatalf("spool files left behind: %v", ents)
	}
	// Reading again: the stream ends with the result and says what it dropped.
	var final api.Event
	for {
		var ev api.Event
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("stream after the run: %v", err)
		}
		if ev.Type == api.EventResult || ev.Type == api.EventError {
			final = ev
			break
		}
	}
	if final.Type != api.EventResult || final.Quarantine != nil || final.Error != nil || final.Dropped == nil || final.Dropped.Stdout == 0 {
		t.Fatalf("final event: type %s quarantine %+v error %v dropped %+v", final.Type, final.Quarantine, final.Error, final.Dropped)
	}
	// A fast client gets every byte, and its copy hashes to the record.
	var out, errs bytes.Buffer
	res, err := d.submit.Run(context.Background(), d.issue("head -c 3000000 /dev/zero | tr '\\0' o; echo done >&2"), &out, &errs, nil)
	if err != nil || res.Streams == nil {
		t.Fatalf("fast client: %v %+v", err, res)
	}
	if got := (api.StreamDigest{SHA256: sumOf(out.Bytes()), Bytes: int64(out.Len())}); got != res.Streams.Stdout || got.Bytes != 3000000 {
		t.Fatalf("fast client's stdout %+v, recorded %+v", got, res.Streams.Stdout)
	}
	if errs.String() != "done\n" || res.Streams.Stderr.SHA256 != sumOf([]byte("done\n")) {
		t.Fatalf("fast client's stderr %q, recorded %+v", errs.String(), res.Streams.Stderr)
	}
}

// TestStalledClientIsDropped: a client that stops reading and stays
// stopped after its run ended is dropped once the stall timeout passes; the
// run is unaffected, and the client, reading again, gets the recorded
// result and receipt instead of a broken stream, with an *IncompleteError
// (and a notice naming custody logs) since its copy of the output is not
// whole.
func TestStalledClientIsDropped(t *testing.T) {
	d := startDaemon(t)
	d.s.stall = time.Second
	started := make(chan string, 1)
	release := make(chan struct{})
	stalled := writerFunc(func(p []byte) (int, error) {
		<-release
		return len(p), nil
	})
	type outcome struct {
		res  *api.Result
		rcpt *api.Receipt
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		res, rcpt, err := d.submit.RunWithReceipt(context.Background(), d.issue(floodScript), stalled, stalled,
			func(id string) { started <- id })
		done <- outcome{res, rcpt, err}
	}()
	id := <-started
	waitRecord(t, d, id, 25*time.Second)
	// The daemon gives up on the stream: the run's handler returns while
	// the client is still stalled.
	for deadline := time.Now().Add(10 * d.s.stall); ; time.Sleep(50 * time.Millisecond) {
		st, err := d.control.Status(context.Background())
		if err == nil && !slices.Contains(st.Running, id) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream of a stalled client was not dropped: %v %v", st, err)
		}
	}
	close(release)
	o := <-done
	var inc *api.IncompleteError
	if !errors.As(o.err, &inc) || o.res == nil || o.res.Status != api.StatusOK || o.rcpt == nil {
		t.Fatalf("stalled client: %v %+v receipt %v", o.err, o.res, o.rcpt != nil)
	}
	if !inc.Lost || inc.RunID != id || inc.Received.Stdout >= inc.Kept.Stdout || inc.Kept.Stdout != host.StreamCap {
		t.Fatalf("stalled client's incomplete copy: %+v", inc)
	}
	if want := floodStreams(); o.res.Streams == nil || *o.res.Streams != want {
		t.Fatalf("streams = %+v, want %+v", o.res.Streams, want)
	}
	if q, err := d.control.Quarantine(context.Background()); err != nil || q.Quarantined {
		t.Fatalf("quarantine after a stalled client: %+v %v", q, err)
	}
}

// TestLostClientCancelsItsRun: a client whose connection goes away while
// the workload floods its stream cancels the run; the run is recorded with
// a receipt and the runner is not quarantined.
func TestLostClientCancelsItsRun(t *testing.T) {
	d := startDaemon(t)
	marker := fmt.Sprint(40000 + os.Getpid()%10000)
	conn, _, id := rawRun(t, d, d.issue("while :; do dd if=/dev/zero bs=65536 count=16 2>/dev/null; done & sleep "+marker))
	time.Sleep(500 * time.Millisecond)
	conn.Close()
	res := waitRecord(t, d, id, 20*time.Second)
	if res.Status != api.StatusCancelled || res.Cleanup == nil || !res.Cleanup.Verified {
		t.Fatalf("run of a lost client: %+v", res)
	}
	if _, err := d.control.GetReceipt(context.Background(), id); err != nil {
		t.Fatalf("receipt of a cancelled run: %v", err)
	}
	if q, err := d.control.Quarantine(context.Background()); err != nil || q.Quarantined {
		t.Fatalf("quarantine after a lost client: %+v %v", q, err)
	}
	noProcess(t, "sleep "+marker)
}

// TestUnverifiedCleanupIsNotSuccess: when cleanup cannot be verified (a
// host process holds a file in the output), the final event carries the
// quarantine and the client gets a "quarantined" error with the result.
func TestUnverifiedCleanupIsNotSuccess(t *testing.T) {
	d := startDaemon(t)
	f := testenv.HoldOutput(t, d.cfg.Runner.RuntimeDir, "held")
	res, _, err := d.run(d.issue("echo x > /out/held; sleep 1"))
	if (<-f) == nil {
		t.Fatal("could not hold the output open")
	}
	wantCode(t, err, "quarantined")
	if res == nil || res.Cleanup == nil || res.Cleanup.Verified {
		t.Fatalf("result of an unverified cleanup: %+v", res)
	}
}

// TestReceiptAbsenceSaysWhy: the receipt endpoint names what the record
// says happened, not "never launched" for every run without a receipt.
func TestReceiptAbsenceSaysWhy(t *testing.T) {
	for _, c := range []struct {
		rec  runrecord.Record
		want string
	}{
		{runrecord.Record{Result: &runrecord.Result{Status: runrecord.StatusRefused, Error: "runner is quarantined"}}, "refused before it launched: runner is quarantined"},
		{runrecord.Record{Result: &runrecord.Result{Status: runrecord.StatusFailed}, ReceiptError: "signing failed: no key"}, "launched (failed) but its receipt was not signed: signing failed: no key"},
		{runrecord.Record{Result: &runrecord.Result{Status: runrecord.StatusFailed, Error: "the runner stopped during this run"}}, "launched (failed) and the runner recorded it without a receipt: the runner stopped"},
	} {
		if got := noReceipt(&c.rec); !strings.Contains(got, c.want) {
			t.Errorf("noReceipt(%+v) = %q, want %q", c.rec.Result, got, c.want)
		}
	}
}

// TestStatusShowsOwnRuns: on the submit socket a client sees only its own
// runs in flight; the operator sees every run on the control socket.
func TestStatusShowsOwnRuns(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()
	started := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.submit.Run(ctx, d.issue("sleep 3"), &bytes.Buffer{}, &bytes.Buffer{}, func(id string) { started <- id })
	}()
	id := <-started
	for _, c := range []struct {
		name   string
		client *api.Client
	}{{"owner on submit", d.submit}, {"operator on control", d.control}} {
		st, err := c.client.Status(ctx)
		if err != nil || !slices.Equal(st.Running, []string{id}) {
			t.Fatalf("%s: running %v (%v), want [%s]", c.name, st.Running, err, id)
		}
	}
	out, err := helperAs(t, d, 65534, "TestHelperStatus", "CUSTODY_HELPER_SOCKET="+d.cfg.SubmitSocket).CombinedOutput()
	if !strings.Contains(string(out), "RUNNING=[]\n") {
		t.Fatalf("another uid's status on the submit socket: %v %s", err, out)
	}
	<-done
}

// TestHelperStatus is not a test: TestStatusShowsOwnRuns runs it as
// another uid.
func TestHelperStatus(t *testing.T) {
	sock := os.Getenv("CUSTODY_HELPER_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	st, err := api.NewClient(sock).Status(context.Background())
	if err != nil {
		fmt.Println("ERR=", err)
		return
	}
	fmt.Printf("RUNNING=%v\n", st.Running)
}
