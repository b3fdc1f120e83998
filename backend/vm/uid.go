package vm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// KindUID is the host uid (and gid) a launch's QEMU runs as: one of the
// configured range, held by one live launch at a time, so that no two
// guests' QEMUs can signal or ptrace each other.
const KindUID = "vm-uid"

// ErrNoUID is returned by Prepare when every uid of the range is held by a
// live launch or used by some process on the host.
var ErrNoUID = errors.New("no free vm uid")

// uidPool hands out one uid of the range per live launch.
type uidPool struct {
	mu   sync.Mutex
	held map[uint32]string // offset -> launch id
}

// allocate gives id the lowest offset that no live launch holds and no
// process on the host runs as (real, effective, saved or fs uid or gid):
// a QEMU left by a crash keeps its uid until it is gone.
func (b *Backend) allocateUID(id string) (uid, gid uint32, err error) {
	busy, err := idsInUse()
	if err != nil {
		return 0, 0, fmt.Errorf("vm uid for %s: %w", id, err)
	}
	p := b.uids
	p.mu.Lock()
	defer p.mu.Unlock()
	for off := uint32(0); off < b.opts.UIDs; off++ {
		uid, gid := b.opts.UID+off, b.opts.GID+off
		if _, held := p.held[off]; held || busy.uids[uid] || busy.gids[gid] {
			continue
		}
		if p.held == nil {
			p.held = map[uint32]string{}
		}
		p.held[off] = id
		return uid, gid, nil
	}
	return 0, 0, fmt.Errorf("%w: all %d uids from %d are held by live launches or used on this host; fix: wait for launches to end, or raise vm.uids", ErrNoUID, b.opts.UIDs, b.opts.UID)
}

// releaseUID returns uid to the pool once its QEMU is verified gone.
func (b *Backend) releaseUID(uid uint32) {
	b.uids.mu.Lock()
	delete(b.uids.held, uid-b.opts.UID)
	b.uids.mu.Unlock()
}

type ids struct{ uids, gids map[uint32]bool }

// idsInUse are the uids and gids of every live process on the host, from
// the Uid and Gid lines of /proc/<pid>/status (a QEMU that dropped to its
// uid is not dumpable, so its /proc dir is root's and says nothing). A
// zombie runs nothing and can signal nobody: it is left out.
func idsInUse() (ids, error) {
	out := ids{uids: map[uint32]bool{}, gids: map[uint32]bool{}}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out, err
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone
		}
		if bytes.Contains(data, []byte("\nState:\tZ")) {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			key, val, _ := strings.Cut(sc.Text(), ":")
			set := map[string]map[uint32]bool{"Uid": out.uids, "Gid": out.gids}[key]
			if set == nil {
				continue
			}
			for _, f := range strings.Fields(val) {
				if n, err := strconv.ParseUint(f, 10, 32); err == nil {
					set[uint32(n)] = true
				}
			}
		}
	}
	return out, nil
}

// uidGone says whether no live process on the host runs as uid.
func uidGone(uid uint32) error {
	busy, err := idsInUse()
	if err != nil {
		return err
	}
	if busy.uids[uid] {
		return fmt.Errorf("a process still runs as vm uid %d", uid)
	}
	return nil
}
