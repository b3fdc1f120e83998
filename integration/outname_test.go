package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
)

// An output name that is not valid UTF-8 (a Latin-1 "café", a directory
// "d\xff" holding a file) once failed output custody and discarded every
// output of the run. Now only those entries are left out, each named
// (Go-quoted, reversibly) with why, in the result; the receipt names the
// retained files and says in a note how many were left out; the run
// succeeds; custody verify accepts the retained outputs and names an added
// non-UTF-8 file; custody result --receipt fetches the same outputs.
func TestOutputNameNotUTF8IsLeftOutAlone(t *testing.T) {
	e := startDaemon(t)
	trust := e.trust(t, "trust-dev.yaml", "development")
	cafe, dir := "caf\xe9", "d\xff"
	g := e.grant(t, e.phase(t, "names", `echo good > /out/good; printf bad > "/out/caf$(printf '\351')"; mkdir "/out/d$(printf '\377')"; echo in > "/out/d$(printf '\377')/x"`, ""))
	out := filepath.Join(e.dir, "r")
	receipt := filepath.Join(out, "receipt.json")
	code, stdout, errs := e.custody("run", "--grant", g, "--receipt", receipt)
	if code != exitOK || !strings.Contains(stdout, "left out 2 output entries") ||
		!strings.Contains(stdout, strconv.Quote(cafe)) || !strings.Contains(stdout, strconv.Quote(dir)) || !strings.Contains(stdout, "not valid UTF-8") {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, errs)
	}
	ents, err := os.ReadDir(filepath.Join(out, "outputs"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "good" {
		t.Fatalf("retained outputs: %v %v", ents, err)
	}
	payload := payloadOfEnvelope(t, readBytes(t, receipt))
	var st struct {
		Predicate struct {
			Output   struct{ Files []struct{ Path string } }
			Observed struct{ Notes []string }
		}
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	if f := st.Predicate.Output.Files; len(f) != 1 || f[0].Path != "good" || !strings.Contains(strings.Join(st.Predicate.Observed.Notes, "\n"), "2 entries the workload wrote were not retained") {
		t.Fatalf("receipt output %+v, notes %q", f, st.Predicate.Observed.Notes)
	}
	if code, vout, verrs := e.custody("verify", receipt, "--trust", trust, "--outputs", filepath.Join(out, "outputs")); code != verifyPromotable {
		t.Fatalf("verify: exit %d\n%s%s", code, vout, verrs)
	}

	// The result, as JSON: the names come back byte for byte.
	id := runIDOf(t, stdout)
	code, jout, jerrs := e.custody("result", id, "--json")
	var res api.Result
	if code != exitOK || json.Unmarshal([]byte(jout), &res) != nil || res.Output == nil || res.Output.LeftOutTotal != 2 || len(res.Output.LeftOut) != 2 {
		t.Fatalf("result --json: exit %d\n%s%s", code, jout, jerrs)
	}
	for i, want := range []string{cafe, dir} {
		if got, err := strconv.Unquote(res.Output.LeftOut[i].Name); err != nil || got != want {
			t.Errorf("leftOut[%d] %q unquotes to %q (%v), want %q", i, res.Output.LeftOut[i].Name, got, err, want)
		}
	}
	// custody result --receipt fetches the same retained outputs.
	again := filepath.Join(e.dir, "again")
	if code, rout, rerrs := e.custody("result", id, "--receipt", filepath.Join(again, "receipt.json")); code != exitOK {
		t.Fatalf("result --receipt: exit %d\n%s%s", code, rout, rerrs)
	}
	if code, vout, verrs := e.custody("verify", filepath.Join(again, "receipt.json"), "--trust", trust, "--outputs", filepath.Join(again, "outputs")); code != verifyPromotable {
		t.Fatalf("verify of the fetched copy: exit %d\n%s%s", code, vout, verrs)
	}
	// A non-UTF-8 file added beside the outputs is named, quoted, and fails.
	write(t, filepath.Join(again, "outputs", cafe), "bad")
	code, vout, verrs := e.custody("verify", filepath.Join(again, "receipt.json"), "--trust", trust, "--outputs", filepath.Join(again, "outputs"))
	if code == verifyPromotable || !strings.Contains(vout+verrs, strconv.Quote(cafe)) {
		t.Fatalf("verify with an added non-UTF-8 file: exit %d\n%s%s", code, vout, verrs)
	}
}

// runIDOf is the run id on the first line of a printed result.
func runIDOf(t *testing.T, printed string) string {
	t.Helper()
	f := strings.Fields(printed)
	if len(f) < 2 || f[0] != "run" {
		t.Fatalf("no run id in\n%s", printed)
	}
	return f[1]
}
