package scratch

import "testing"

// TestSplit: the two parts never exceed the budget, /dev/shm gets whole
// pages of a quarter, and a budget under four pages gives it none.
func TestSplit(t *testing.T) {
	for _, tt := range []struct{ budget, tmp, shm int64 }{
		{16 << 20, 12 << 20, 4 << 20},
		{4096 * 3, 4096 * 3, 0},
		{4096*4 + 100, 4096 * 3, 4096},
		{100, 100, 0},
	} {
		tmp, shm := Split(tt.budget, 4096)
		if tmp != tt.tmp || shm != tt.shm || tmp+shm > tt.budget {
			t.Errorf("Split(%d) = %d, %d; want %d, %d", tt.budget, tmp, shm, tt.tmp, tt.shm)
		}
	}
}
