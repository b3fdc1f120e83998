package platform

import (
	"errors"
	"fmt"
	"os"

	"github.com/custody-dev/custody/internal/procfs"
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
	st := procfs.ParseStatus(b)
	s := seccompStatus{mode: st.Seccomp, filters: st.SeccompFilters}
	if s.mode < 0 {
		return s, errors.New("no Seccomp line, or not a number (kernel built without CONFIG_SECCOMP?)")
	}
	return s, nil
}
