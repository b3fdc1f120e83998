package guest

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends r as JSON: what encoding/json decodes into the same
// Report (the host reads it with encoding/json), written without
// reflection, which under TCG the init would translate to run once.
func (r *Report) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	if r.Error != "" {
		b = appendField(b, "error", true)
		b = appendJSONString(b, r.Error)
	}
	b = appendField(b, "code", r.Error == "")
	b = strconv.AppendInt(b, int64(r.Code), 10)
	if r.Signal != "" {
		b = appendField(b, "signal", false)
		b = appendJSONString(b, r.Signal)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"peakMemory", r.PeakMemory}, {"cpuUsec", r.CPUUsec}, {"oomKills", r.OOMKills}, {"memoryMax", r.MemoryMax}, {"pidsMax", r.PidsMax}} {
		b = appendField(b, f.name, false)
		b = strconv.AppendInt(b, f.v, 10)
	}
	b = appendField(b, "cpuMax", false)
	b = appendJSONString(b, r.CPUMax)
	b = appendField(b, "mounts", false)
	b = appendArray(b, r.Mounts, func(b []byte, m Mount) []byte {
		b = appendField(append(b, '{'), "target", true)
		b = appendJSONString(b, m.Target)
		b = appendField(b, "fstype", false)
		b = appendJSONString(b, m.FSType)
		b = appendField(b, "readOnly", false)
		return append(strconv.AppendBool(b, m.ReadOnly), '}')
	})
	b = appendField(b, "interfaces", false)
	b = appendJSONStrings(b, r.Interfaces)
	if r.Seccomp != "" {
		b = appendField(b, "seccomp", false)
		b = appendJSONString(b, r.Seccomp)
	}
	b = appendField(b, "noNewPrivs", false)
	b = strconv.AppendBool(b, r.NoNewPrivs)
	if len(r.Notes) > 0 {
		b = appendField(b, "notes", false)
		b = appendJSONStrings(b, r.Notes)
	}
	b = appendField(b, "outputSha256", false)
	b = appendJSONString(b, r.OutputSHA256)
	b = appendField(b, "initUptime", false)
	b = appendJSONFloat(b, r.InitUptime)
	b = appendField(b, "readyUptime", false)
	b = appendJSONFloat(b, r.ReadyUptime)
	if len(r.Steps) > 0 {
		b = appendField(b, "steps", false)
		b = appendArray(b, r.Steps, func(b []byte, s Step) []byte {
			b = appendField(append(b, '{'), "name", true)
			b = appendJSONString(b, s.Name)
			b = appendField(b, "uptime", false)
			return append(appendJSONFloat(b, s.Uptime), '}')
		})
	}
	b = appendField(b, "started", false)
	b = strconv.AppendInt(b, r.Started, 10)
	b = appendField(b, "finished", false)
	b = strconv.AppendInt(b, r.Finished, 10)
	return append(b, '}')
}

// appendField appends a member's name and colon, after a comma unless it
// is the object's first.
func appendField(b []byte, name string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendJSONStrings(b []byte, ss []string) []byte { return appendArray(b, ss, appendJSONString) }

// appendArray appends xs as a JSON array of each one's encoding; a nil
// slice is null, as encoding/json writes it.
func appendArray[T any](b []byte, xs []T, each func([]byte, T) []byte) []byte {
	if xs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = each(b, x)
	}
	return append(b, ']')
}

// appendJSONString appends s as a JSON string: quote, backslash and
// control characters escaped, invalid UTF-8 as U+FFFD, as encoding/json
// decodes it back.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json writes a float64; a NaN or
// an infinity, which JSON cannot hold, is 0.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, '0')
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, 64)
}
