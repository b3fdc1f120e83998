package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Port is the name of the one virtio-serial port, guest to host: the
// control messages, stdout, stderr and the output tar travel on it as
// frames of their streams. One port, not one per stream: under TCG the
// guest's driver takes about 70 ms to add each port, before any of them
// can be opened.
const Port = "custody.streams"

// The streams of Port.
const (
	// StreamControl carries StartedLine, then the Report.
	StreamControl byte = 'c'
	StreamStdout  byte = '1'
	StreamStderr  byte = '2'
	// StreamOutput is the output tree as a tar.
	StreamOutput byte = 't'
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
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewMux returns a Mux that writes frames to w.
func NewMux(w io.Writer) *Mux { return &Mux{w: w, buf: make([]byte, frameHeader+MaxFrame)} }

func (m *Mux) frame(id byte, p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buf[0] = id
	binary.BigEndian.PutUint32(m.buf[1:frameHeader], uint32(len(p)))
	n := copy(m.buf[frameHeader:], p)
	_, err := m.w.Write(m.buf[:frameHeader+n])
	return err
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
// stream, a length over MaxFrame, a frame after its stream's end, or a
// truncated frame.
var ErrBadFrame = errors.New("malformed guest stream frame")

// Demux reads frames from r until it ends and writes each payload to its
// stream's sink. A sink whose Write fails gets nothing more (its frames
// are read and dropped) while the other streams go on, so one consumer
// that stops never holds up the rest. It returns the streams that were
// ended by their end frame; on a malformed frame it stops there, with an
// ErrBadFrame error. It holds at most one frame in memory.
func Demux(r io.Reader, sinks map[byte]io.Writer) (map[byte]bool, error) {
	ended := map[byte]bool{}
	failed := map[byte]bool{}
	hdr := make([]byte, frameHeader)
	buf := make([]byte, MaxFrame)
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
		case !ok:
			return ended, fmt.Errorf("%w: unknown stream %q", ErrBadFrame, id)
		case n > MaxFrame:
			return ended, fmt.Errorf("%w: a frame of %d bytes on stream %q, at most %d", ErrBadFrame, n, id, MaxFrame)
		case ended[id]:
			return ended, fmt.Errorf("%w: a frame on stream %q after its end", ErrBadFrame, id)
		case n == 0:
			ended[id] = true
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
