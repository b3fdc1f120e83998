package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/custody-dev/custody/backend/vm/guest"
)

// cpioWriter writes the initramfs as an uncompressed newc archive (the
// kernel's initramfs format): decompressing is the slow part of a TCG
// boot. It writes only what the host put together, never guest data.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func newCpio(w io.Writer) *cpioWriter { return &cpioWriter{w: w, ino: 1} }

// cpioHeader is what a newc entry records beyond its name and data.
type cpioHeader struct {
	mode                 uint32
	uid, gid             uint32
	mtime                int64
	rdevMajor, rdevMinor int
}

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	c.entryOf(name, cpioHeader{mode: mode, rdevMajor: rdevMajor, rdevMinor: rdevMinor}, data)
}

func (c *cpioWriter) entryOf(name string, h cpioHeader, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, h.mode, h.uid, h.gid, 1, uint32(h.mtime), len(data), 0, 0, h.rdevMajor, h.rdevMinor, len(name)+1, 0)
	pad := func(n int) []byte { return make([]byte, (4-n%4)%4) }
	for _, b := range [][]byte{[]byte(hdr), []byte(name), {0}, pad(110 + len(name) + 1), data, pad(len(data))} {
		if _, err := c.w.Write(b); err != nil {
			c.err = err
			return
		}
	}
}

func (c *cpioWriter) dir(name string) { c.entry(name, 0o040755, 0, 0, nil) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, 0o100000|perm, 0, 0, data)
}

// char is a character device node, such as /dev/console, which the kernel
// opens for init's stdio before init runs.
func (c *cpioWriter) char(name string, major, minor int) {
	c.entry(name, 0o020600, major, minor, nil)
}

// guestBase writes what every guest's initramfs starts with: the mount
// points, the console node, the init and the workload stage.
func (c *cpioWriter) guestBase(files *guestFiles) {
	for _, d := range []string{"dev", "proc", "sys", "custody", guest.ModulesDir[1:]} {
		c.dir(d)
	}
	c.char("dev/console", 5, 1)
	c.file("init", 0o755, files.init)
	c.file(guest.StagePath[1:], 0o755, files.stage)
}

func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
