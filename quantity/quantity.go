// Package quantity parses the byte sizes and durations that appear in phase
// requests and operator policy ("64Mi", "1GiB", "30s").
package quantity

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"go.yaml.in/yaml/v3"
)

// Bytes is a non-negative byte count. In YAML and JSON it is written either as
// an integer or as a string with a binary suffix ("64Mi", "64MiB", "1G"); all
// suffixes are powers of 1024 so a budget never silently shrinks.
type Bytes int64

// ParseBytes parses s as a byte quantity.
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty byte quantity")
	}
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("byte quantity %q is negative", s)
	}
	// go-units reads "64MiB" and "64M"; accept the Kubernetes-style "64Mi" too.
	if strings.HasSuffix(t, "i") || strings.HasSuffix(t, "I") {
		t += "B"
	}
	n, err := units.RAMInBytes(t)
	if err != nil {
		return 0, fmt.Errorf("invalid byte quantity %q (want e.g. 64Mi, 1Gi or a plain integer)", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("byte quantity %q is negative", s)
	}
	return Bytes(n), nil
}

func (b Bytes) String() string { return units.BytesSize(float64(b)) }

// UnmarshalYAML accepts an integer or a suffixed string.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: byte quantity must be a scalar", n.Line)
	}
	v, err := ParseBytes(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// MarshalJSON writes the exact integer so digests over plans are stable.
func (b Bytes) MarshalJSON() ([]byte, error) { return []byte(strconv.FormatInt(int64(b), 10)), nil }

// UnmarshalJSON accepts an integer or a suffixed string.
func (b *Bytes) UnmarshalJSON(p []byte) error {
	var s string
	if err := json.Unmarshal(p, &s); err == nil {
		v, err := ParseBytes(s)
		if err != nil {
			return err
		}
		*b = v
		return nil
	}
	var n int64
	if err := json.Unmarshal(p, &n); err != nil {
		return fmt.Errorf("byte quantity must be an integer or a string: %w", err)
	}
	if n < 0 {
		return fmt.Errorf("byte quantity %d is negative", n)
	}
	*b = Bytes(n)
	return nil
}

// Duration is a positive Go duration written as "30s", "5m", "1h30m".
type Duration time.Duration

// ParseDuration parses s as a duration; zero and negative are refused.
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 30s or 5m)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return Duration(d), nil
}

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML accepts a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a scalar", n.Line)
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = v
	return nil
}

// MarshalJSON writes the canonical string form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a duration string.
func (d *Duration) UnmarshalJSON(p []byte) error {
	var s string
	if err := json.Unmarshal(p, &s); err != nil {
		return fmt.Errorf("duration must be a string: %w", err)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}
