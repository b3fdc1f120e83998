package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"sync"
)

// StreamCap bounds each of a run's stdout and stderr as the runner keeps
// them. Past it the workload's writes are still read (it never blocks on a
// full pipe) and discarded; the stream's record says it was truncated.
const StreamCap = 16 << 20

// spool is one output stream of a run: it digests and counts up to
// StreamCap bytes and passes each kept chunk to the caller's live writer.
// A write always takes all it is given, so the workload's pipe is drained
// whatever happens; the live writer must not block (see Launch). Nothing
// is kept on disk: the digest is what a receipt binds.
type spool struct {
	mu        sync.Mutex
	name      string
	h         hash.Hash
	n         int64
	truncated bool
	live      io.Writer
}

func newSpool(name string, live io.Writer) *spool {
	return &spool{name: name, h: sha256.New(), live: live}
}

func (s *spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := p
	if room := StreamCap - s.n; int64(len(keep)) > room {
		keep = keep[:max(room, 0)]
		if !s.truncated && s.live != nil {
			defer fmt.Fprintf(s.live, "\n[custody: %s truncated at %d bytes; the rest was discarded]\n", s.name, StreamCap)
		}
		s.truncated = true
	}
	if len(keep) == 0 {
		return len(p), nil
	}
	s.h.Write(keep)
	s.n += int64(len(keep))
	if s.live != nil {
		_, _ = s.live.Write(keep)
	}
	// Always all of p: the workload's pipe is drained whatever happens here.
	return len(p), nil
}

// digest is the stream's record.
func (s *spool) digest() Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stream{SHA256: hex.EncodeToString(s.h.Sum(nil)), Bytes: s.n, Truncated: s.truncated}
}

// spools are a run's stdout and stderr.
type spools struct{ stdout, stderr *spool }

func openSpools(stdout, stderr io.Writer) *spools {
	return &spools{stdout: newSpool("stdout", stdout), stderr: newSpool("stderr", stderr)}
}

// record records both streams on res.
func (s *spools) record(res *Result) {
	res.Streams = &Streams{Stdout: s.stdout.digest(), Stderr: s.stderr.digest()}
}
