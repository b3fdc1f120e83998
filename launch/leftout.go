package launch

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/custody-dev/custody/runrecord"
)

// MaxLeftOutListed bounds the output entries a result lists as left out;
// it counts them all.
const MaxLeftOutListed = 64

// leftOutReason is why an output entry whose name is not valid UTF-8 is
// not retained: a receipt names each output file in JSON, which carries
// only valid UTF-8, and a name rewritten to fit would name another file.
const leftOutReason = "its name is not valid UTF-8, which a receipt cannot name; fix: have the workload name its outputs in UTF-8"

// leftOut collects the output entries a custody walk leaves out (its
// treehash.Options.Leave). A small output is walked twice (Reuse, then
// Take), so entries are kept by path, once.
type leftOut struct {
	mu    sync.Mutex
	paths map[string]bool
}

// leave leaves out an entry whose path is not valid UTF-8. Its parent's
// path was valid, or the walk would not have reached it, so the entry's
// own name is the one at fault.
func (l *leftOut) leave(path string) bool {
	if utf8.ValidString(path) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paths == nil {
		l.paths = map[string]bool{}
	}
	l.paths[path] = true
	return true
}

// list is the entries left out, in path order, the first
// MaxLeftOutListed of them, and how many there were.
func (l *leftOut) list() ([]runrecord.LeftOut, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	paths := make([]string, 0, len(l.paths))
	for p := range l.paths {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var out []runrecord.LeftOut
	for _, p := range paths[:min(len(paths), MaxLeftOutListed)] {
		out = append(out, runrecord.LeftOut{Name: strconv.Quote(p), Reason: leftOutReason})
	}
	return out, len(paths)
}

// maxNoteName keeps the receipt's note well within a text field's bound.
const maxNoteName = 256

// leftOutNote is what a receipt says of the output entries left out, or
// "" when none were: an observation, in the receipt's notes, so that the
// receipt's list of retained files is not read as all the workload wrote.
func leftOutNote(o *runrecord.Output) string {
	if o == nil || o.LeftOutTotal == 0 {
		return ""
	}
	first := o.LeftOut[0].Name
	if len(first) > maxNoteName {
		first = first[:maxNoteName] + "..."
	}
	return fmt.Sprintf("output: %d entries the workload wrote were not retained (the first: %s): %s",
		o.LeftOutTotal, first, leftOutReason)
}
