// Package quantity parses the byte sizes and durations that appear in phase
// requests and operator policy ("64Mi", "1GiB", "30s").
package quantity

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"go.yaml.in/yaml/v3"
)

// Bytes is a non-negative byte count. In YAML and JSON it is written either as
// an integer or as a string: a whole number with an optional binary suffix
// (Ki, Mi, Gi, Ti, Pi, Ei, each optionally followed by B), as Kubernetes
// writes binary quantities. Suffixes without the i ("1G", "64MB", "64m")
// are refused rather than read: Kubernetes reads 1G as 10^9 bytes and Docker
// as 2^30, and a budget must mean one thing.
type Bytes int64

// BytesPattern is the JSON Schema pattern of a positive byte quantity
// string; the schemas that use Bytes carry it verbatim, and their tests
// check that they do.
const BytesPattern = `^0*[1-9][0-9]*((Ki|Mi|Gi|Ti|Pi|Ei)B?)?$`

// DurationPattern is the JSON Schema pattern of a positive duration.
const DurationPattern = `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))*([0-9]*[1-9][0-9]*(\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)(ns|us|µs|ms|s|m|h)([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))*$`

// ErrAmbiguous is returned for a byte quantity whose suffix means a power
// of 1000 to some tools and a power of 1024 to others.
var ErrAmbiguous = errors.New("ambiguous byte quantity")

// ErrRange is returned for a quantity too large to hold.
var ErrRange = errors.New("quantity out of range")

// decimalSuffix is what other tools read as a unit but custody refuses
// as ambiguous.
var decimalSuffix = regexp.MustCompile(`^[kKmMgGtTpPeE][bB]?$`)

var binarySuffix = map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}

// ParseBytes parses s as a byte quantity.
func ParseBytes(s string) (Bytes, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	num, suffix := s[:i], s[i:]
	if strings.HasSuffix(suffix, "iB") {
		suffix = strings.TrimSuffix(suffix, "B")
	}
	mult, ok := binarySuffix[suffix]
	switch {
	case num == "" && strings.HasPrefix(s, "-"):
		return 0, fmt.Errorf("byte quantity %q is negative; fix: give a size such as 64Mi", s)
	case num == "" || (!ok && suffix != "" && !decimalSuffix.MatchString(suffix)):
		return 0, fmt.Errorf("invalid byte quantity %q; fix: write a whole number with a binary suffix, e.g. 64Mi or 1Gi, or a plain number of bytes", s)
	case !ok && suffix != "":
		return 0, fmt.Errorf("%w %q: decimal and bare suffixes (k, M, G, MB, ...) mean 10^3 steps to Kubernetes and 2^10 steps to Docker; fix: write the binary form, e.g. 1Gi for 2^30 bytes, or a plain number of bytes", ErrAmbiguous, s)
	case suffix == "":
		mult = 1
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%w: byte quantity %q does not fit in 63 bits", ErrRange, s)
	}
	return Bytes(n * mult), nil
}

func (b Bytes) String() string { return units.BytesSize(float64(b)) }

// UnmarshalYAML accepts an integer or a suffixed string.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: byte quantity must be a scalar", n.Line)
	}
	v, err := ParseBytes(n.Value)
	if err != nil && n.Tag == "!!float" {
		// A YAML number such as 1e3 or 64.0: read as the JSON Schema does,
		// so an integral value is a byte count and any other is refused.
		v, err = integralBytes(n.Value)
	}
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

func integralBytes(s string) (Bytes, error) {
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil || f != math.Trunc(f) || f < 0:
		return 0, fmt.Errorf("invalid byte quantity %s; fix: write a whole number with a binary suffix, e.g. 64Mi or 1Gi, or a plain number of bytes", s)
	case f >= math.MaxInt64:
		return 0, fmt.Errorf("%w: byte quantity %s does not fit in 63 bits", ErrRange, s)
	}
	return Bytes(f), nil
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

// durationForm is the grammar of a duration, as the schemas write it.
var durationForm = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)

var positiveDuration = regexp.MustCompile(DurationPattern)

// Duration is a positive Go duration written as "30s", "5m", "1h30m".
type Duration time.Duration

// ParseDuration parses s as a duration; zero and negative are refused.
func ParseDuration(s string) (Duration, error) {
	if !durationForm.MatchString(s) {
		return 0, fmt.Errorf("invalid duration %q; fix: write a duration such as 30s, 5m or 1h30m", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		// The grammar holds, so only the size can be wrong.
		return 0, fmt.Errorf("%w: duration %q is longer than about 290 years", ErrRange, s)
	}
	if d <= 0 && positiveDuration.MatchString(s) {
		return 0, fmt.Errorf("%w: duration %q is shorter than a nanosecond", ErrRange, s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be positive; fix: give a duration such as 30s", s)
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

// MarshalYAML writes the canonical string form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

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
