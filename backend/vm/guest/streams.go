package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The streams travel as frames, first on the early channel, then, once the
// guest has written more than EarlyBytes, on the port.
//
// The early channel is an ISA debug console at I/O port EarlyIOPort: no
// driver, one OUTSB the init alone can issue, about 0.6 MB/s under TCG.
// The port is the one virtio-serial port named Port: fast, but the guest
// gets it only after loading the virtio modules and its driver's adding of
// the port, most of a small phase's setup under TCG (about 160 ms). So the
// init loads them only when a launch's streams outgrow the early channel:
// it then writes a switch frame there, and every later frame goes on the
// port. One port, not one per stream: the driver takes about 70 ms to add
// each.
const (
	EarlyIOPort = 0x5e0
	EarlyBytes  = 16 << 10
	Port        = "custody.streams"
)

// The streams of Port.
const (
	// StreamControl carries StartedLine, then the Report.
	StreamControl byte = 'c'
	StreamStdout  byte = '1'
	StreamStderr  byte = '2'
	// StreamOutput is the output tree as a tar.
	StreamOutput byte = 't'
	// streamSwitch, in an empty frame on the early channel, says that
	// every later frame is on the port.
	streamSwitch byte = 's'
)

// MaxFrame is the most payload one frame carries.
const MaxFrame = 64 << 10

// A frame is its stream's byte, its payload's length (4 bytes, big
// endian, at most MaxFrame) and the payload. A frame of length 0 ends its
// stream; nothing of that stream may follow it.
const frameHeader = 5

// Mux writes streams as frames onto one writer; its streams may be
// written from several goroutines.
type Mux struct {
	mu      sync.Mutex
	w       io.Writer
	buf     []byte
	port    func() (io.Writer, error)
	limit   int64
	written int64
	err     error
}

// NewMux returns a Mux that writes frames to early until a frame would
// take what it wrote there past limit bytes; it then calls port once and
// writes that frame and every later one to the writer port returns, after
// a switch frame on early. A failed switch fails that write and every
// later one.
func NewMux(early io.Writer, limit int64, port func() (io.Writer, error)) *Mux {
	return &Mux{w: early, buf: make([]byte, frameHeader+MaxFrame), port: port, limit: limit}
}

func (m *Mux) frame(id byte, p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	n := copy(m.buf[frameHeader:], p)
	if m.port != nil && m.written+frameHeader+int64(n) > m.limit {
		if m.err = m.switchToPort(); m.err != nil {
			return m.err
		}
	}
	m.buf[0] = id
	binary.BigEndian.PutUint32(m.buf[1:frameHeader], uint32(n))
	_, err := m.w.Write(m.buf[:frameHeader+n])
	m.written += frameHeader + int64(n)
	return err
}

func (m *Mux) switchToPort() error {
	w, err := m.port()
	m.port = nil
	if err != nil {
		return fmt.Errorf("the streams' port: %w", err)
	}
	if _, err := m.w.Write([]byte{streamSwitch, 0, 0, 0, 0}); err != nil {
		return err
	}
	m.w = w
	return nil
}

// Stream is the writer of one stream; Close ends it.
func (m *Mux) Stream(id byte) io.WriteCloser { return &muxStream{m: m, id: id} }

type muxStream struct {
	m      *Mux
	id     byte
	closed bool
}

func (s *muxStream) Write(p []byte) (int, error) {
	if s.closed {
		return 0, errors.New("write to an ended stream")
	}
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), MaxFrame)]
		if err := s.m.frame(s.id, chunk); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

func (s *muxStream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.m.frame(s.id, nil)
}

// ErrBadFrame is returned by Demux for a stream it cannot read: an unknown
// stream, a length over MaxFrame, a frame after its stream's end, a
// truncated frame, or a switch that is not an empty frame on the early
// channel.
var ErrBadFrame = errors.New("malformed guest stream frame")

// Demux reads frames from early, and after a switch frame from port, until
// that one ends, and writes each payload to its stream's sink. A sink
// whose Write fails gets nothing more (its frames are read and dropped)
// while the other streams go on, so one consumer that stops never holds
// up the rest. It returns the streams that were ended by their end frame;
// on a malformed frame it stops there, with an ErrBadFrame error. It holds
// at most one frame in memory. The caller drains both readers after it:
// whatever a guest writes where it is not read is dropped, never left
// blocking QEMU.
func Demux(early, port io.Reader, sinks map[byte]io.Writer) (map[byte]bool, error) {
	return DemuxNotify(early, port, sinks, nil)
}

// ReportAck is the byte the host writes on the port once it has read the
// end of StreamControl there: every frame before it has then been read. A
// virtio-serial write returns once its buffer is queued, not once the host
// has it, and a guest reset drops what is still queued; so the init, when
// its streams moved to the port, waits for this byte before it resets
// the machine. On the early channel nothing needs it: each OUTSB returns
// only once QEMU has written its bytes out.
const ReportAck byte = 'k'

// DemuxNotify is Demux calling notify, when it is not nil, as each
// stream's end frame is read, with whether it came on the port.
func DemuxNotify(early, port io.Reader, sinks map[byte]io.Writer, notify func(id byte, onPort bool)) (map[byte]bool, error) {
	ended := map[byte]bool{}
	failed := map[byte]bool{}
	hdr := make([]byte, frameHeader)
	buf := make([]byte, MaxFrame)
	r, onPort := early, false
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			if err == io.EOF {
				return ended, nil
			}
			return ended, fmt.Errorf("%w: a truncated header: %v", ErrBadFrame, err)
		}
		id, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
		sink, ok := sinks[id]
		switch {
		case id == streamSwitch && n == 0 && !onPort:
			r, onPort = port, true
			continue
		case id == streamSwitch:
			return ended, fmt.Errorf("%w: a switch to the port on the port, or with a payload", ErrBadFrame)
		case !ok:
			return ended, fmt.Errorf("%w: unknown stream %q", ErrBadFrame, id)
		case n > MaxFrame:
			return ended, fmt.Errorf("%w: a frame of %d bytes on stream %q, at most %d", ErrBadFrame, n, id, MaxFrame)
		case ended[id]:
			return ended, fmt.Errorf("%w: a frame on stream %q after its end", ErrBadFrame, id)
		case n == 0:
			ended[id] = true
			if notify != nil {
				notify(id, onPort)
			}
			continue
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return ended, fmt.Errorf("%w: a truncated frame on stream %q: %v", ErrBadFrame, id, err)
		}
		if !failed[id] {
			if _, err := sink.Write(buf[:n]); err != nil {
				failed[id] = true
			}
		}
	}
}
