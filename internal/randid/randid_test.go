package randid

import (
	"regexp"
	"testing"
)

func TestNew(t *testing.T) {
	hexRE := regexp.MustCompile(`^[0-9a-f]*$`)
	seen := map[string]bool{}
	for _, n := range []int{0, 6, 8, 16} {
		for range 100 {
			id := New(n)
			if len(id) != 2*n || !hexRE.MatchString(id) {
				t.Fatalf("New(%d) = %q, want %d lowercase hex digits", n, id, 2*n)
			}
			if n >= 8 && seen[id] {
				t.Fatalf("New(%d) repeated %q", n, id)
			}
			seen[id] = true
		}
	}
}
