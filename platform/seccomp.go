package platform

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// seccompStatus is the seccomp state from a /proc status file.
type seccompStatus struct {
	mode    int // Seccomp: 0 disabled, 1 strict, 2 filter
	filters int // Seccomp_filters (Linux 5.9+); -1 when absent
}

func readSeccompStatus(path string) (seccompStatus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return seccompStatus{}, fmt.Errorf("read seccomp status: %w", err)
	}
	s, err := parseSeccompStatus(b)
	if err != nil {
		return seccompStatus{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func parseSeccompStatus(b []byte) (seccompStatus, error) {
	s := seccompStatus{mode: -1, filters: -1}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *int
		switch string(key) {
		case "Seccomp":
			dst = &s.mode
		case "Seccomp_filters":
			dst = &s.filters
		default:
			continue
		}
		n, err := strconv.Atoi(string(bytes.TrimSpace(val)))
		if err != nil {
			return s, fmt.Errorf("%s: %w", key, err)
		}
		*dst = n
	}
	if s.mode < 0 {
		return s, fmt.Errorf("no Seccomp line (kernel built without CONFIG_SECCOMP?)")
	}
	return s, nil
}
