package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
)

// StreamCap bounds each of a run's stdout and stderr as the runner keeps
// them. Past it the workload's writes are still read (it never blocks on a
// full pipe) and discarded; the stream's record says it was truncated.
const StreamCap = 16 << 20

// spool is where one output stream of a run goes first: a file in the
// runner's state dir (0600, at most StreamCap bytes), hashed as it is
// written. A write always takes all it is given, so the workload's pipe is
// drained whatever happens; the live writer a caller gave sees each kept
// chunk after the spool has it, and must not block (see Launch).
type spool struct {
	mu        sync.Mutex
	name      string
	f         *os.File
	h         hash.Hash
	n         int64
	truncated bool
	err       error
	live      io.Writer
}

func spoolDir(stateDir string) string { return filepath.Join(stateDir, "spool") }

func newSpool(dir, runID, name string, live io.Writer) (*spool, error) {
	// O_EXCL|O_NOFOLLOW: a fresh private file, never one planted there.
	f, err := os.OpenFile(filepath.Join(dir, runID+"."+name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", name, err)
	}
	return &spool{name: name, f: f, h: sha256.New(), live: live}, nil
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
	if s.err == nil {
		_, s.err = s.f.Write(keep)
	}
	s.h.Write(keep)
	s.n += int64(len(keep))
	if s.live != nil {
		_, _ = s.live.Write(keep)
	}
	// Always all of p: the workload's pipe is drained whatever happens here.
	return len(p), nil
}

// close removes the spool file and returns the stream's record. The bytes
// were delivered live; the record is what a receipt binds.
func (s *spool) close() (api.StreamDigest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.err
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(s.f.Name()); err == nil {
		err = rerr
	}
	return api.StreamDigest{SHA256: hex.EncodeToString(s.h.Sum(nil)), Bytes: s.n, Truncated: s.truncated}, err
}

// spools are a run's stdout and stderr spools.
type spools struct{ stdout, stderr *spool }

func (r *Runner) openSpools(runID string, stdout, stderr io.Writer) (*spools, error) {
	out, err := newSpool(spoolDir(r.cfg.StateDir), runID, "stdout", stdout)
	if err != nil {
		return nil, err
	}
	errs, err := newSpool(spoolDir(r.cfg.StateDir), runID, "stderr", stderr)
	if err != nil {
		out.close()
		return nil, err
	}
	return &spools{stdout: out, stderr: errs}, nil
}

// close records both streams on res.
func (s *spools) close(res *api.Result) error {
	out, oerr := s.stdout.close()
	errs, eerr := s.stderr.close()
	res.Streams = &api.Streams{Stdout: out, Stderr: errs}
	if oerr != nil {
		return oerr
	}
	return eerr
}
