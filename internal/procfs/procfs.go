// Package procfs parses the /proc files custody reads about a process:
// stat (state and start time), status (capabilities, no_new_privs,
// seccomp) and net/dev (interface names). They are often a sandboxed
// process's files, so the parsers take any bytes and never panic. It uses
// the standard library only, so that the in-sandbox probe can import it.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// ErrMalformed is returned for a stat file that does not have the fields
// proc(5) gives it.
var ErrMalformed = errors.New("malformed /proc stat file")

// Stat is what custody reads of /proc/<pid>/stat.
type Stat struct {
	// State is the one-letter process state (R, S, D, Z, ...).
	State byte
	// UTime, STime, CUTime and CSTime are the CPU times in clock ticks
	// (USER_HZ) of the process and of its reaped children.
	UTime, STime, CUTime, CSTime int64
	// StartTime is the start time after boot in clock ticks, as printed:
	// with the pid, it names one process (a pid alone may be reused).
	StartTime string
}

// ReadStat reads and parses /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// ParseStat parses a /proc/<pid>/stat file. The command name may hold
// spaces and parentheses, so the fields are counted from the last ')'.
func ParseStat(data []byte) (Stat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return Stat{}, ErrMalformed
	}
	// Fields after the name: state is field 3 overall, utime..cstime
	// 14-17, starttime 22.
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, ErrMalformed
	}
	st := Stat{State: f[0][0], StartTime: f[19]}
	for k, dst := range []*int64{&st.UTime, &st.STime, &st.CUTime, &st.CSTime} {
		n, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil {
			return Stat{}, ErrMalformed
		}
		*dst = n
	}
	if _, err := strconv.ParseUint(st.StartTime, 10, 64); err != nil {
		return Stat{}, ErrMalformed
	}
	return st, nil
}

// Status holds the security fields of /proc/<pid>/status.
type Status struct {
	// Caps maps each capability set the kernel printed (CapInh, CapPrm,
	// CapEff, CapBnd, CapAmb) to its value as printed (16 hex digits).
	Caps map[string]string
	// NoNewPrivs is 1 when no_new_privs is set; -1 when not reported or
	// not a number.
	NoNewPrivs int
	// Seccomp is 0 (off), 1 (strict) or 2 (filter); -1 when not reported
	// or not a number.
	Seccomp int
	// SeccompFilters is the number of attached filters; -1 when not
	// reported (before Linux 5.9) or not a number.
	SeccompFilters int
}

// ParseStatus reads the security fields of a /proc/<pid>/status file.
// Lines it does not know are skipped.
func ParseStatus(data []byte) Status {
	st := Status{Caps: map[string]string{}, NoNewPrivs: -1, Seccomp: -1, SeccompFilters: -1}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch {
		case strings.HasPrefix(key, "Cap"):
			st.Caps[key] = val
		case key == "NoNewPrivs":
			st.NoNewPrivs = atoi(val)
		case key == "Seccomp":
			st.Seccomp = atoi(val)
		case key == "Seccomp_filters":
			st.SeccompFilters = atoi(val)
		}
	}
	return st
}

// atoi is a non-negative decimal, or -1.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ParseNetDev returns the interface names of a /proc/net/dev file,
// sorted.
func ParseNetDev(data []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, _, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue // the two header lines have "|" but no ":"
		}
		if name = strings.TrimSpace(name); name != "" && !strings.Contains(name, "|") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Cgroup is one line of /proc/<pid>/cgroup: the hierarchy's controllers
// as printed ("memory", "cpu,cpuacct", "name=systemd"; "" for the unified
// hierarchy) and the process's cgroup path in it.
type Cgroup struct {
	Controllers string
	Path        string
}

// ParseCgroup parses a /proc/<pid>/cgroup file. A line is kept only when
// its path is absolute and clean, so that joining it under a hierarchy's
// mount point can never leave that mount.
func ParseCgroup(data []byte) []Cgroup {
	var out []Cgroup
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") || path.Clean(parts[2]) != parts[2] {
			continue
		}
		out = append(out, Cgroup{Controllers: parts[1], Path: parts[2]})
	}
	return out
}
