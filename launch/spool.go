package launch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/runrecord"
)

// spool is one output stream of a run: it digests and counts up to
// host.StreamCap bytes and passes each kept chunk to the caller's live writer.
// A write always takes all it is given, so the workload's pipe is drained
// whatever happens; the live writer must not block (see execute). The kept
// bytes also go to a file in the runner's logs dir (custody logs), so its
// sha256 is the one the receipt binds; a file that cannot be written is
// removed rather than kept short (the digest still covers every kept byte).
// The file is made at the first kept byte: an empty stream has none (and
// reads as empty), which spares most runs two creates and two fsyncs.
type spool struct {
	mu        sync.Mutex
	name      string
	h         hash.Hash
	n         int64
	truncated bool
	live      io.Writer
	path      string   // where kept bytes go; "" when not kept (or no longer)
	file      *os.File // open once the first byte was kept
	keepErr   error    // why the stream is not kept, when that failed
}

func newSpool(name string, live io.Writer) *spool {
	return &spool{name: name, h: sha256.New(), live: live}
}

func (s *spool) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := p
	if room := host.StreamCap - s.n; int64(len(keep)) > room {
		keep = keep[:max(room, 0)]
		if !s.truncated && s.live != nil {
			defer fmt.Fprintf(s.live, "\n[custody: %s truncated at %d bytes; the rest was discarded]\n", s.name, host.StreamCap)
		}
		s.truncated = true
	}
	if len(keep) == 0 {
		return len(p), nil
	}
	s.h.Write(keep)
	s.n += int64(len(keep))
	if s.path != "" && s.file == nil {
		f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			s.path, s.keepErr = "", fmt.Errorf("keep %s: %w", s.name, err)
		}
		s.file = f
	}
	if s.file != nil {
		if _, err := s.file.Write(keep); err != nil {
			s.keepErr = fmt.Errorf("keep %s: %w", s.name, err)
			s.drop()
		}
	}
	if s.live != nil {
		_, _ = s.live.Write(keep)
	}
	// Always all of p: the workload's pipe is drained whatever happens here.
	return len(p), nil
}

// digest is the stream's record.
func (s *spool) digest() runrecord.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return runrecord.Stream{SHA256: hex.EncodeToString(s.h.Sum(nil)), Bytes: s.n, Truncated: s.truncated}
}

// drop stops keeping the stream on disk and removes what was kept: a log
// file is either the whole kept stream or absent. s.mu is held.
func (s *spool) drop() {
	name := s.file.Name()
	s.file.Close()
	s.file, s.path = nil, ""
	_ = os.Remove(name)
}

// detach stops writing the log file and hands it over (nil when none was
// made), with why the stream is not kept if that failed: what the file
// holds is final.
func (s *spool) detach() (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.file
	s.file, s.path = nil, ""
	return f, s.keepErr
}

// finish syncs and closes a detached log file; one that cannot be synced
// is removed.
func finish(f *os.File) {
	if err := f.Sync(); err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		return
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
	}
}

// spools are a run's stdout and stderr.
type spools struct {
	stdout, stderr *spool
	synced         sync.WaitGroup // the log files' syncs (see record)
	runID          string
	log            *slog.Logger
}

// openSpools makes a run's spools; with logDir set each also keeps its
// stream in LogPath(logDir, runID, name), made at its first byte. A log
// file that cannot be made or written is logged and the run goes on
// without it.
func openSpools(stdout, stderr io.Writer, logDir, runID string, log *slog.Logger) *spools {
	sp := &spools{stdout: newSpool("stdout", stdout), stderr: newSpool("stderr", stderr), runID: runID, log: log}
	if logDir != "" {
		for _, s := range []*spool{sp.stdout, sp.stderr} {
			s.path = host.LogPath(logDir, runID, s.name)
		}
	}
	return sp
}

// record records both streams on res and starts syncing and closing
// their log files, both at once and beside the output custody and cleanup
// that follow (each fsync is a journal commit of its own, a millisecond or
// more); wait joins them, before the run's record lands.
func (s *spools) record(res *runrecord.Result) {
	for _, sp := range []*spool{s.stdout, s.stderr} {
		f, err := sp.detach()
		if err != nil {
			s.log.Warn("run log not kept", "run", s.runID, "stream", sp.name, "err", err)
		}
		if f != nil {
			s.synced.Go(func() { finish(f) })
		}
	}
	res.Streams = &runrecord.Streams{Stdout: s.stdout.digest(), Stderr: s.stderr.digest()}
}

// wait returns once the log files record started are synced (or removed).
func (s *spools) wait() { s.synced.Wait() }
