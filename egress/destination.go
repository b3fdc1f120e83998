package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrDestination: a host:port is not an exact destination custody can
// allow.
var ErrDestination = errors.New("not an allowable destination")

var labelPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Destination is one exact host name and port.
type Destination struct {
	Host string
	Port uint16
}

// String is "host:port".
func (d Destination) String() string { return d.Host + ":" + strconv.Itoa(int(d.Port)) }

// ParseDestination parses "host:port": a lowercase DNS name of at least two
// labels (no wildcard, no trailing dot, no IP literal) and a port from 1 to
// 65535. IP literals are refused so that every destination goes through
// the proxy's resolution and address checks.
func ParseDestination(s string) (Destination, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return Destination{}, fmt.Errorf("%q: %w: want host:port, e.g. api.example.com:443", s, ErrDestination)
	}
	host, port := s[:i], s[i+1:]
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || port[0] == '0' {
		return Destination{}, fmt.Errorf("%q: %w: port %q is not a number from 1 to 65535", s, ErrDestination, port)
	}
	if strings.HasPrefix(host, "[") {
		return Destination{}, fmt.Errorf("%q: %w: IP literals are never allowed; name the host", s, ErrDestination)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return Destination{}, fmt.Errorf("%q: %w: IP literals are never allowed; name the host", s, ErrDestination)
	}
	if !hostName(host) {
		return Destination{}, fmt.Errorf("%q: %w: host %q is not an exact lowercase DNS name (no wildcard, no trailing dot)", s, ErrDestination, host)
	}
	return Destination{Host: host, Port: uint16(n)}, nil
}

// hostName reports whether h is a lowercase DNS name of two or more labels
// whose last label is not all digits.
func hostName(h string) bool {
	if len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if !labelPattern.MatchString(l) {
			return false
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}

// Allowlist is the set of destinations a run may reach.
type Allowlist struct{ ds []Destination }

// NewAllowlist parses every entry; one bad entry refuses the list.
func NewAllowlist(entries []string) (Allowlist, error) {
	var a Allowlist
	for _, e := range entries {
		d, err := ParseDestination(e)
		if err != nil {
			return Allowlist{}, err
		}
		if !slices.Contains(a.ds, d) {
			a.ds = append(a.ds, d)
		}
	}
	return a, nil
}

// Allows reports whether d is in the list, exactly.
func (a Allowlist) Allows(d Destination) bool { return slices.Contains(a.ds, d) }

// Entries are the destinations as "host:port", in order.
func (a Allowlist) Entries() []string {
	out := make([]string, len(a.ds))
	for i, d := range a.ds {
		out[i] = d.String()
	}
	return out
}

// splitTarget parses what a client names (a CONNECT target or a Host),
// with defPort used when it has none. Unlike ParseDestination it accepts
// any form, so that the refusal can name what was asked; an IP literal or
// an upper-case name is returned as is and never matches the allowlist.
func splitTarget(s string, defPort uint16) (Destination, bool) {
	host, port := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 && !strings.HasSuffix(s, "]") {
		host, port = s[:i], s[i+1:]
	}
	p := defPort
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return Destination{}, false
		}
		p = uint16(n)
	}
	if host == "" || p == 0 {
		return Destination{}, false
	}
	return Destination{Host: host, Port: p}, true
}
