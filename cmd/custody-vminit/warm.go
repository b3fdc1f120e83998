package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend/vm/guest"
)

// awaitTake is a warm guest's wait for its launch, once its init has made
// all that the profile fixes. It loads the port's modules, opens the
// streams' port, writes guest.PooledReady on it, and blocks reading one
// Take: a 4-byte big-endian length and a guest.Config encoding, at most
// guest.MaxTakeBytes. The Take replaces cfg whole (the host built it from
// the same profile, with the grant's argv, environment, working directory
// and inputs); its Seed is mixed into the kernel's pool at once. One Take
// only: the init runs one workload and resets the machine, so no guest
// serves a second grant.
func (s *streams) awaitTake(cfg *guest.Config, step func(string)) error {
	for _, m := range cfg.PortModules {
		if err := loadModule(filepath.Join(guest.ModulesDir, m)); err != nil {
			return err
		}
	}
	var port *os.File
	if err := findPort(&port); err != nil {
		return err
	}
	s.mu.Lock()
	s.port = port
	s.mu.Unlock()
	step("warm")
	if _, err := port.Write([]byte{guest.PooledReady}); err != nil {
		return fmt.Errorf("warm guest: signal ready: %w", err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(port, hdr[:]); err != nil {
		return fmt.Errorf("warm guest: read the take: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > guest.MaxTakeBytes {
		return fmt.Errorf("warm guest: a take of %d bytes, more than %d", n, guest.MaxTakeBytes)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(port, data); err != nil {
		return fmt.Errorf("warm guest: read the take: %w", err)
	}
	var take guest.Config
	if err := take.UnmarshalBinary(data); err != nil {
		return fmt.Errorf("warm guest: the take: %w", err)
	}
	if take.Pooled {
		return errors.New("warm guest: a take that asks to wait for another")
	}
	if len(take.Seed) != guest.SeedBytes {
		return fmt.Errorf("warm guest: a take with %d bytes of seed, not %d", len(take.Seed), guest.SeedBytes)
	}
	if err := mixSeed(take.Seed); err != nil {
		return err
	}
	*cfg = take
	step("take")
	return nil
}

// mixSeed writes the host's seed to /dev/urandom, which mixes it into the
// kernel's input pool, then has the kernel reseed its generator from that
// pool at once (RNDRESEEDCRNG; a write alone reaches the generator only
// at its next scheduled reseed). The kernel was already seeded at this
// guest's own boot (RDRAND, which QEMU serves from the host's getrandom,
// trusted with random.trust_cpu=on, and its own interrupt timings); this
// makes what the workload reads depend on entropy drawn at the take too.
func mixSeed(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("warm guest: the seed: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(seed); err != nil {
		return fmt.Errorf("warm guest: the seed: %w", err)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.RNDRESEEDCRNG, 0); err != nil {
		return fmt.Errorf("warm guest: reseed the kernel's generator: %w", err)
	}
	return nil
}

// flushDisk drops what the kernel has cached of a block device.
func flushDisk(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0); err != nil {
		return fmt.Errorf("flush its cache: %w", err)
	}
	return nil
}
