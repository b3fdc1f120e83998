package testenv

import (
	"bytes"
	"sync"
)

// Buffer collects a child process's output and can be read while the
// child still writes: exec.Cmd copies a non-*os.File Stdout or Stderr from
// its own goroutine, so a bare bytes.Buffer read before Wait returns is a
// data race.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what has been written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset discards what has been written.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}
