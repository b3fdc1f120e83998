package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
)

// TestVerifierOnlyInputRoots runs real custodyd and runc: with the
// acceptance directory under policy verifierRoots (and also beneath
// inputRoots), a verifier test phase mounts and reads it; a build phase
// naming it, or the directory holding it, is refused at issue with the
// requirement, the reason and the fix, before anything runs.
func TestVerifierOnlyInputRoots(t *testing.T) {
	d := startDaemon(t)
	hidden := filepath.Join(d.dir, "src", "hidden")
	if err := os.MkdirAll(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hidden, "answer.txt"), []byte("forty-two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+fmt.Sprintf("verifierRoots: [%q]\n", hidden))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	phase := func(stage, source string, verifier bool) api.PhaseSource {
		p := d.phase("cat /in/answer.txt 2>/dev/null || cat /in/hidden/answer.txt")
		p.YAML = bytes.Replace(p.YAML, []byte("stage: build\n"), []byte("stage: "+stage+"\n"), 1)
		p.YAML = bytes.Replace(p.YAML, []byte("source: ./src\n"), []byte("source: "+source+"\n"), 1)
		if verifier {
			p.YAML = append(p.YAML, "verifier: true\n"...)
		}
		return p
	}

	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: phase("test", "./src/hidden", true), Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatalf("the verifier phase was refused: %v", err)
	}
	var out bytes.Buffer
	res, err := d.submit.Run(context.Background(), env, &out, &out, nil)
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out.String(), "forty-two") {
		t.Fatalf("the verifier phase: %v %+v\n%s", err, res, out.String())
	}

	for _, tc := range []struct{ stage, source string }{{"build", "./src/hidden"}, {"build", "./src"}, {"test", "./src/hidden"}} {
		_, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: phase(tc.stage, tc.source, false), Actor: "ci-bot", TTL: "15m"})
		msg := fmt.Sprint(err)
		if err == nil || !strings.Contains(msg, "inputs[0].source") || !strings.Contains(msg, "input-verifier-only") {
			t.Errorf("a %s phase naming %s: %v, want refused with input-verifier-only", tc.stage, tc.source, err)
		}
	}
}
