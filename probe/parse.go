package probe

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/custody-dev/custody/internal/procfs"
)

// ParseStatus reads the security fields of a /proc/PID/status file.
// Fields the kernel did not print stay "" (capabilities) or -1 (numbers).
func ParseStatus(data []byte) ProcStatus {
	st := procfs.ParseStatus(data)
	return ProcStatus{CapInh: st.Caps["CapInh"], CapPrm: st.Caps["CapPrm"], CapEff: st.Caps["CapEff"],
		CapBnd: st.Caps["CapBnd"], CapAmb: st.Caps["CapAmb"],
		NoNewPrivs: st.NoNewPrivs, Seccomp: st.Seccomp, SeccompFilters: st.SeccompFilters}
}

// mountRecord is a parsed mountinfo line with the fields ParseMountInfo
// needs beyond Mount.
type mountRecord struct {
	Mount
	root string // root of the mount within its filesystem
}

// ParseMountInfo parses /proc/PID/mountinfo (proc(5)). Malformed lines
// are skipped and counted in bad.
func ParseMountInfo(data []byte) (mounts []Mount, bad int) {
	recs, bad := parseMountRecords(data)
	for _, r := range recs {
		mounts = append(mounts, r.Mount)
	}
	return mounts, bad
}

func parseMountRecords(data []byte) (recs []mountRecord, bad int) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		// id parent major:minor root target options [optional...] - fstype source superoptions
		if sep < 6 || len(f) < sep+4 {
			bad++
			continue
		}
		r := mountRecord{
			Mount: Mount{
				Target:       unescapeOctal(f[4]),
				Options:      f[5],
				FSType:       f[sep+1],
				Source:       unescapeOctal(f[sep+2]),
				SuperOptions: f[sep+3],
			},
			root: unescapeOctal(f[3]),
		}
		r.ReadOnly = hasOption(r.Options, "ro") || hasOption(r.SuperOptions, "ro")
		recs = append(recs, r)
	}
	return recs, bad
}

func hasOption(opts, o string) bool { return slices.Contains(strings.Split(opts, ","), o) }

// unescapeOctal undoes the \ooo escapes the kernel uses for spaces, tabs,
// newlines and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseNetDev returns the interface names of a /proc/net/dev file.
func ParseNetDev(data []byte) []string { return procfs.ParseNetDev(data) }

// ParseIDMap normalises a /proc/PID/{uid,gid}_map file to "in out count"
// lines.
func ParseIDMap(data []byte) []string {
	out := []string{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// cgroupLine is one line of /proc/PID/cgroup: "id:controllers:path".
type cgroupLine struct {
	controllers []string // empty for the unified (v2) hierarchy
	path        string
}

func parseCgroupFile(data []byte) []cgroupLine {
	var out []cgroupLine
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var ctrls []string
		if f[1] != "" {
			ctrls = strings.Split(f[1], ",")
		}
		out = append(out, cgroupLine{controllers: ctrls, path: f[2]})
	}
	return out
}

// ParseSize parses a byte count with an optional binary suffix (K, Ki,
// KiB, M, Mi, MiB, G, Gi, GiB; all powers of 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"Gi", 1 << 30}, {"G", 1 << 30}, {"MiB", 1 << 20}, {"Mi", 1 << 20}, {"M", 1 << 20},
		{"KiB", 1 << 10}, {"Ki", 1 << 10}, {"K", 1 << 10}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want e.g. 4Mi or 4096)", s)
	}
	return n * mult, nil
}

// ParseKeyValues parses a flat-keyed cgroup file: "key value" lines with
// integer values (cpu.stat, memory.events, ...). Other lines are skipped.
func ParseKeyValues(data []byte) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}
