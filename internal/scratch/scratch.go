// Package scratch splits a workload's tmp budget between its /tmp and its
// /dev/shm, the same way in a container (backend/oci) and in a guest
// (cmd/custody-vminit). Standard library only: the guest's init links it.
package scratch

// Split splits budget between /tmp and /dev/shm: /dev/shm gets a quarter
// of it and /tmp the rest, both in whole pages (a tmpfs rounds its size up
// to one), so that together they never exceed it. A budget too small to
// give /dev/shm a page leaves shm 0: /dev/shm is then read-only and /tmp
// has the whole budget.
func Split(budget, page int64) (tmp, shm int64) {
	shm = budget / 4 / page * page
	tmp = budget - shm
	if tmp >= page {
		tmp = tmp / page * page
	}
	return tmp, shm
}
