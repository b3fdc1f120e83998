package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// configMagic begins an encoded Config: its format and version.
const configMagic = "custody-guest-config/2\n"

// ErrConfig is the error of a Config that does not decode.
var ErrConfig = errors.New("guest config")

// MarshalBinary encodes c as the init reads it: configMagic, then each
// field in declaration order (strings and slices length-prefixed, with
// uvarints; integers as varints; CPU as its IEEE 754 bits; bools as one
// byte). Not JSON: under TCG each code path the guest runs first is
// translated first, and encoding/json's reflection was about a tenth of
// the init's own time for one small struct.
func (c *Config) MarshalBinary() ([]byte, error) {
	b := []byte(configMagic)
	b = appendStrings(b, c.Modules)
	b = appendStrings(b, c.PortModules)
	b = appendStrings(b, c.Args)
	b = appendStrings(b, c.Env)
	b = appendString(b, c.Cwd)
	b = appendString(b, c.Hostname)
	b = binary.AppendUvarint(b, uint64(c.UID))
	b = binary.AppendUvarint(b, uint64(c.GID))
	b = appendStrings(b, c.Inputs)
	b = appendString(b, c.OutputPath)
	for _, n := range []int64{c.OutputBytes, c.OutputFiles, c.TmpBytes, c.Memory, c.Pids} {
		b = binary.AppendVarint(b, n)
	}
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(c.CPU))
	b = binary.AppendVarint(b, c.FileSize)
	b = append(b, boolByte(c.Seccomp), boolByte(c.RootInInitramfs), boolByte(c.Pooled))
	return appendString(b, string(c.Seed)), nil
}

// UnmarshalBinary decodes what MarshalBinary encoded, all of it: a
// truncated encoding, a length past its end, a bool that is neither 0 nor
// 1 or trailing bytes are ErrConfig, and c is then left unchanged.
func (c *Config) UnmarshalBinary(data []byte) error {
	if len(data) < len(configMagic) || string(data[:len(configMagic)]) != configMagic {
		return fmt.Errorf("%w: not a %q encoding", ErrConfig, configMagic[:len(configMagic)-1])
	}
	d := decoder{b: data[len(configMagic):]}
	var v Config
	v.Modules, v.PortModules, v.Args, v.Env = d.strings(), d.strings(), d.strings(), d.strings()
	v.Cwd, v.Hostname = d.string(), d.string()
	v.UID, v.GID = d.uint32(), d.uint32()
	v.Inputs = d.strings()
	v.OutputPath = d.string()
	for _, p := range []*int64{&v.OutputBytes, &v.OutputFiles, &v.TmpBytes, &v.Memory, &v.Pids} {
		*p = d.varint()
	}
	v.CPU = math.Float64frombits(d.uint64())
	v.FileSize = d.varint()
	v.Seccomp, v.RootInInitramfs, v.Pooled = d.bool(), d.bool(), d.bool()
	if seed := d.string(); seed != "" {
		v.Seed = []byte(seed)
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, d.err)
	}
	*c = v
	return nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// decoder reads an encoding; its first error stops it.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New("truncated or malformed " + what)
	}
}

func (d *decoder) uvarint() uint64 { return readVarint(d, binary.Uvarint, "uvarint") }

func (d *decoder) varint() int64 { return readVarint(d, binary.Varint, "varint") }

func readVarint[T uint64 | int64](d *decoder, read func([]byte) (T, int), what string) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail("uint32")
		return 0
	}
	return uint32(v)
}

func (d *decoder) uint64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail("uint64")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// strings reads a slice; an empty one is nil. Its count is bounded by the
// bytes left (each string takes at least its length's byte), so a forged
// count cannot make a huge allocation.
func (d *decoder) strings() []string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail("string list")
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.string()
	}
	return out
}

func (d *decoder) bool() bool {
	if d.err != nil || len(d.b) < 1 || d.b[0] > 1 {
		d.fail("bool")
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}
