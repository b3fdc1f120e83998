package guest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"

	"github.com/custody-dev/custody/backend/vm/guest"
)

func sinks() (map[byte]io.Writer, map[byte]*bytes.Buffer) {
	bufs := map[byte]*bytes.Buffer{}
	ws := map[byte]io.Writer{}
	for _, id := range []byte{guest.StreamControl, guest.StreamStdout, guest.StreamStderr, guest.StreamOutput} {
		bufs[id] = &bytes.Buffer{}
		ws[id] = bufs[id]
	}
	return ws, bufs
}

// newMux is a Mux that never leaves w.
func newMux(w io.Writer) *guest.Mux { return guest.NewMux(w, math.MaxInt64, nil) }

func empty() io.Reader { return bytes.NewReader(nil) }

func frame(id byte, n uint32, payload string) []byte {
	b := []byte{id, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], n)
	return append(b, payload...)
}

// TestStreamsRoundTrip: what the guest writes on its streams, interleaved
// and in pieces larger than a frame, is what the host reads of each, and
// every closed stream is reported ended: on the early channel alone, and
// when the streams outgrow it and move to the port (once, the frame that
// would pass the limit the first on the port).
func TestStreamsRoundTrip(t *testing.T) {
	for _, limit := range []int64{math.MaxInt64, 40, 0} {
		var early, port bytes.Buffer
		switches := 0
		mux := guest.NewMux(&early, limit, func() (io.Writer, error) { switches++; return &port, nil })
		roundTrip(t, mux, &early, &port)
		if want := map[bool]int{true: 0, false: 1}[limit == math.MaxInt64]; switches != want {
			t.Errorf("limit %d: %d switches, want %d", limit, switches, want)
		}
		if limit != math.MaxInt64 && int64(early.Len()) > limit+5 {
			t.Errorf("limit %d: %d bytes on the early channel", limit, early.Len())
		}
	}
}

func roundTrip(t *testing.T, mux *guest.Mux, early, port io.Reader) {
	t.Helper()
	ctl, out, tar := mux.Stream(guest.StreamControl), mux.Stream(guest.StreamStdout), mux.Stream(guest.StreamOutput)
	big := bytes.Repeat([]byte("0123456789abcdef"), guest.MaxFrame/8+3) // > 2 frames
	for _, w := range []struct {
		s io.Writer
		p []byte
	}{{ctl, []byte(guest.StartedLine)}, {out, []byte("hello ")}, {tar, big}, {out, []byte("world\n")}} {
		if _, err := w.s.Write(w.p); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []io.Closer{out, tar, ctl} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctl.Write([]byte("late")); err == nil {
		t.Error("a write to an ended stream was taken")
	}
	ws, bufs := sinks()
	ended, err := guest.Demux(early, port, ws)
	if err != nil {
		t.Fatal(err)
	}
	if got := bufs[guest.StreamStdout].String(); got != "hello world\n" {
		t.Errorf("stdout %q", got)
	}
	if !bytes.Equal(bufs[guest.StreamOutput].Bytes(), big) {
		t.Errorf("output: %d bytes, want %d", bufs[guest.StreamOutput].Len(), len(big))
	}
	if got := bufs[guest.StreamControl].String(); got != guest.StartedLine {
		t.Errorf("control %q", got)
	}
	if !ended[guest.StreamControl] || !ended[guest.StreamStdout] || !ended[guest.StreamOutput] || ended[guest.StreamStderr] {
		t.Errorf("ended %v, want control, stdout and output only", ended)
	}
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) { f.n++; return 0, errors.New("consumer gone") }

// TestDemuxFailedSinkDoesNotStall: a consumer that stops gets nothing more,
// and the other streams still arrive whole.
func TestDemuxFailedSinkDoesNotStall(t *testing.T) {
	var port bytes.Buffer
	mux := newMux(&port)
	tar, out := mux.Stream(guest.StreamOutput), mux.Stream(guest.StreamStdout)
	for i := 0; i < 3; i++ {
		_, _ = tar.Write([]byte("junk"))
		_, _ = out.Write([]byte("line\n"))
	}
	_ = out.Close()
	ws, bufs := sinks()
	bad := &failing{}
	ws[guest.StreamOutput] = bad
	ended, err := guest.Demux(&port, empty(), ws)
	if err != nil {
		t.Fatal(err)
	}
	if bad.n != 1 {
		t.Errorf("the failed sink was written %d times, want once", bad.n)
	}
	if got := bufs[guest.StreamStdout].String(); got != "line\nline\nline\n" || !ended[guest.StreamStdout] {
		t.Errorf("stdout %q ended %v", got, ended)
	}
}

// TestDemuxRefusesMalformed: each malformed frame stops the demux with
// ErrBadFrame, after what came before it was delivered.
func TestDemuxRefusesMalformed(t *testing.T) {
	ok := frame(guest.StreamStdout, 3, "abc")
	for name, tail := range map[string][]byte{
		"unknown stream":          frame('x', 1, "a"),
		"frame over the maximum":  frame(guest.StreamOutput, guest.MaxFrame+1, ""),
		"huge length":             frame(guest.StreamOutput, 0xffffffff, "a"),
		"truncated header":        {guest.StreamStdout, 0, 0},
		"truncated payload":       frame(guest.StreamStdout, 10, "abc"),
		"data after the end":      append(frame(guest.StreamStderr, 0, ""), frame(guest.StreamStderr, 1, "a")...),
		"a switch with a payload": frame('s', 1, "a"),
	} {
		t.Run(name, func(t *testing.T) {
			ws, bufs := sinks()
			_, err := guest.Demux(bytes.NewReader(append(append([]byte{}, ok...), tail...)), empty(), ws)
			if !errors.Is(err, guest.ErrBadFrame) {
				t.Fatalf("err %v, want ErrBadFrame", err)
			}
			if bufs[guest.StreamStdout].String() != "abc" {
				t.Errorf("the frame before the bad one was not delivered: %q", bufs[guest.StreamStdout])
			}
		})
	}
}

// TestDemuxSwitchOnlyFromEarly: a switch frame on the port is malformed,
// and the port is read only after the early channel's switch.
func TestDemuxSwitchOnlyFromEarly(t *testing.T) {
	ws, bufs := sinks()
	early := append(frame(guest.StreamStdout, 1, "a"), frame('s', 0, "")...)
	port := append(frame(guest.StreamStdout, 1, "b"), frame('s', 0, "")...)
	if _, err := guest.Demux(bytes.NewReader(early), bytes.NewReader(port), ws); !errors.Is(err, guest.ErrBadFrame) {
		t.Errorf("a switch on the port: %v, want ErrBadFrame", err)
	}
	if got := bufs[guest.StreamStdout].String(); got != "ab" {
		t.Errorf("stdout %q, want ab", got)
	}
	ws, bufs = sinks()
	if _, err := guest.Demux(bytes.NewReader(frame(guest.StreamStdout, 1, "a")), bytes.NewReader(port), ws); err != nil {
		t.Fatal(err)
	}
	if got := bufs[guest.StreamStdout].String(); got != "a" {
		t.Errorf("the port was read without a switch: stdout %q", got)
	}
}

// TestMuxFailedSwitch: when the port cannot be had, the write that needed
// it fails, and so does every later one, on any stream.
func TestMuxFailedSwitch(t *testing.T) {
	var early bytes.Buffer
	mux := guest.NewMux(&early, 8, func() (io.Writer, error) { return nil, errors.New("no port") })
	out, ctl := mux.Stream(guest.StreamStdout), mux.Stream(guest.StreamControl)
	if _, err := out.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("past the limit")); err == nil {
		t.Error("a write past the limit without a port was taken")
	}
	if _, err := ctl.Write([]byte("x")); err == nil {
		t.Error("a write after a failed switch was taken")
	}
	if got := early.Bytes(); !bytes.Equal(got, frame(guest.StreamStdout, 1, "a")) {
		t.Errorf("early channel %q", got)
	}
}

// FuzzDemux: whatever the guest sends, the demux never writes more than
// it read, never holds more than a frame, and either ends cleanly or says
// ErrBadFrame.
func FuzzDemux(f *testing.F) {
	var port bytes.Buffer
	mux := newMux(&port)
	s := mux.Stream(guest.StreamControl)
	_, _ = s.Write([]byte(guest.StartedLine))
	_ = s.Close()
	f.Add(port.Bytes())
	f.Add(frame(guest.StreamOutput, guest.MaxFrame, ""))
	f.Add(append(frame(guest.StreamStdout, 1, "a"), frame('?', 0, "")...))
	// A switch at the half: "a" early, "b" and "c" on the port.
	f.Add(append(append(frame(guest.StreamStdout, 1, "a"), frame('s', 0, "")...),
		append(frame(guest.StreamStdout, 1, "b"), frame(guest.StreamStdout, 1, "c")...)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The first half on the early channel, the rest on the port.
		ws, bufs := sinks()
		_, err := guest.Demux(bytes.NewReader(data[:len(data)/2]), bytes.NewReader(data[len(data)/2:]), ws)
		if err != nil && !errors.Is(err, guest.ErrBadFrame) {
			t.Fatalf("err %v is not ErrBadFrame", err)
		}
		total := 0
		for _, b := range bufs {
			total += b.Len()
		}
		if total > len(data) {
			t.Fatalf("wrote %d bytes from %d", total, len(data))
		}
	})
}
