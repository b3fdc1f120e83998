package quantity

import (
	"encoding/json"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestParseBytes(t *testing.T) {
	good := map[string]Bytes{"64Mi": 64 << 20, "64MiB": 64 << 20, "64m": 64 << 20, "1G": 1 << 30, "1Gi": 1 << 30, "100": 100, "1.5Gi": 3 << 29}
	for in, want := range good {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "-5Mi", "lots", "5 parsecs"} {
		if _, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) accepted", in)
		}
	}
}

func TestDuration(t *testing.T) {
	if d, err := ParseDuration("1m30s"); err != nil || time.Duration(d) != 90*time.Second {
		t.Fatalf("ParseDuration = %v, %v", d, err)
	}
	for _, in := range []string{"0s", "-1s", "forever", ""} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
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
