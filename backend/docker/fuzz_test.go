package docker

import (
	"strings"
	"testing"
)

const fuzzToken = "custody-probe-0123456789abcdef"

func TestParseProof(t *testing.T) {
	good := "peer=" + fuzzToken + " \nworld=nc: timed out \ngateway=nc: can't connect to remote host (172.20.0.1): No route to host \nhost=nc: timed out \n"
	if p := parseProof(good, fuzzToken); !p.Blocks() {
		t.Fatalf("%s", p)
	}
	for name, out := range map[string]string{
		"refused peer":      strings.Replace(good, "peer="+fuzzToken, "peer=nc: Connection refused", 1),
		"gateway answered":  strings.Replace(good, "No route to host", "Connection refused", 1),
		"world got a token": strings.Replace(good, "world=nc: timed out", "world="+fuzzToken, 1),
		"missing host":      strings.Replace(good, "host=nc: timed out \n", "", 1),
		"duplicate world":   good + "world=nc: timed out\n",
		"garbage":           "Segmentation fault\n",
	} {
		if p := parseProof(out, fuzzToken); p.Blocks() {
			t.Errorf("%s: Blocks() true for %q", name, out)
		}
	}
}

// The prober's output comes from inside a container: no input may make a
// proof hold unless each target's own line says so.
func FuzzParseProof(f *testing.F) {
	f.Add("peer=" + fuzzToken + "\nworld=nc: timed out\ngateway=nc: timed out\nhost=nc: timed out\n")
	f.Add("peer=nc: Connection refused\nworld=x\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, out string) {
		p := parseProof(out, fuzzToken)
		if !p.Blocks() {
			return
		}
		lines := map[string]int{}
		for _, l := range strings.Split(out, "\n") {
			if k, _, ok := strings.Cut(l, "="); ok {
				lines[k]++
			}
		}
		for _, k := range []string{"peer", "world", "gateway", "host"} {
			if lines[k] != 1 {
				t.Fatalf("Blocks() with %d %q lines in %q", lines[k], k, out)
			}
		}
		if !strings.Contains(out, fuzzToken) {
			t.Fatalf("Blocks() without the control's token in %q", out)
		}
	})
}
