package quantity

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestParseBytes(t *testing.T) {
	good := map[string]Bytes{"64Mi": 64 << 20, "64MiB": 64 << 20, "1Gi": 1 << 30, "1GiB": 1 << 30, "100": 100, "0": 0,
		"3Ki": 3 << 10, "2Ti": 2 << 40, "1Pi": 1 << 50, "7Ei": 7 << 60, "9223372036854775807": 1<<63 - 1}
	for in, want := range good {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "-5Mi", "lots", "5 parsecs", "1.5Gi", " 1Mi", "1Mi ", "1 Mi", "1mi", "1Mib", "0x10", "+1", "1B", "1b"} {
		if _, err := ParseBytes(in); err == nil || errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrRange) {
			t.Errorf("ParseBytes(%q) = %v, want a plain refusal", in, err)
		}
	}
	// Kubernetes reads these as powers of 1000 (and "64m" as milli-bytes),
	// Docker as powers of 1024: refused, never guessed.
	for _, in := range []string{"1G", "1GB", "64m", "64M", "64MB", "1k", "1K", "1KB", "1kB", "2T", "1gb", "3E"} {
		if _, err := ParseBytes(in); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("ParseBytes(%q) = %v, want ErrAmbiguous", in, err)
		}
	}
	for _, in := range []string{"9223372036854775808", "8Ei", "99999999999999999999Ki"} {
		if _, err := ParseBytes(in); !errors.Is(err, ErrRange) {
			t.Errorf("ParseBytes(%q) = %v, want ErrRange", in, err)
		}
	}
}

func TestDuration(t *testing.T) {
	if d, err := ParseDuration("1m30s"); err != nil || time.Duration(d) != 90*time.Second {
		t.Fatalf("ParseDuration = %v, %v", d, err)
	}
	for _, in := range []string{"0s", "0.0m", "-1s", "forever", "", " 30s", "30", "1d"} {
		if _, err := ParseDuration(in); err == nil || errors.Is(err, ErrRange) {
			t.Errorf("ParseDuration(%q) = %v, want a plain refusal", in, err)
		}
	}
	if _, err := ParseDuration("9999999999h"); !errors.Is(err, ErrRange) {
		t.Errorf("ParseDuration(9999999999h) = %v, want ErrRange", err)
	}
}

func TestRoundTrip(t *testing.T) {
	var v struct {
		B Bytes    `yaml:"b" json:"b"`
		D Duration `yaml:"d" json:"d"`
	}
	if err := yaml.Unmarshal([]byte("b: 2Mi\nd: 5s\n"), &v); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil || string(out) != `{"b":2097152,"d":"5s"}` {
		t.Fatalf("json = %s, %v", out, err)
	}
	if err := json.Unmarshal(out, &v); err != nil || v.B != 2<<20 || time.Duration(v.D) != 5*time.Second {
		t.Fatalf("json round trip = %+v, %v", v, err)
	}
	if err := yaml.Unmarshal([]byte("b: [1]\n"), &v); err == nil {
		t.Fatal("a sequence was accepted as a byte quantity")
	}
}
