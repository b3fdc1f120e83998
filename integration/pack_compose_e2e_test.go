package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/dockertest"
)

// composeSample is a file in the shape of the public compose samples
// (without a name:, which custody now takes from the directory, as
// compose does): the keys met first are ones that custody refuses, each
// for its own reason, and every one of them must come back in one answer.
const composeSample = `version: "3.8"
services:
  web:
    image: %[1]s
    container_name: web
    scale: 2
    frobnicate: 1
    labels:
      dev.custody.workspace: mine
  db:
    image: %[1]s
    runtime: runc
    x-notes: kept
    ports: ["${DB_PORT}:5432"]
include:
  - other.compose.yaml
`

// TestPackComposeRefusalsInOneAnswer: a compose file that compose-go
// parses is never an internal error. pack admit answers every refused key
// at once, in file order, as an admission refusal (exit 2, the --json
// checks of any refusal), each with its reason and fix; grant issue
// refuses the same, and nothing is granted.
func TestPackComposeRefusalsInOneAnswer(t *testing.T) {
	e := startPackEnv(t)
	noted := e.write("sample/noted.compose.yaml", fmt.Sprintf("version: \"3.8\"\nname: noted\nservices:\n  web:\n    image: %s\n    labels: {org.example.tier: web}\n"+
		"    networks: [inner]\n    mem_limit: 32m\n    cpus: 0.25\n    pids_limit: 32\nnetworks:\n  inner:\n    internal: true\n", dockertest.ImageRef))
	// A client's dry run never probes the engine: the operator's dry run
	// proves it first.
	if code, out, errs := e.pack("admit", noted, "--actor", "range-op", "--operator"); code != exitOK {
		t.Fatalf("operator admit: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	compose := e.write("sample/sample.compose.yaml", fmt.Sprintf(composeSample, dockertest.ImageRef))
	code, out, errs := e.pack("admit", compose, "--actor", "range-op", "--json")
	var adm api.PackAdmitResponse
	if code != exitRefused || json.Unmarshal([]byte(out), &adm) != nil || adm.Admitted {
		t.Fatalf("admit: exit %d, want %d with a refusal\nstdout: %s\nstderr: %s", code, exitRefused, out, errs)
	}
	want := []string{"services.web.scale", "services.web.frobnicate",
		"services.web.labels", "services.db.runtime", "services.db.x-notes", "services.db.ports[0]", "include"}
	var got []string
	for _, c := range adm.Checks {
		got = append(got, c.Requirement)
		if c.Verdict != "unsupported" || c.Code == "" || c.Code == "internal" || c.Detail == "" || c.Fix == "" {
			t.Errorf("check %+v: want an unsupported verdict with a code, a reason and a fix", c)
		}
		for _, leak := range []string{"issue ", "package ", "compose-go", "custody/"} {
			if strings.Contains(c.Detail+c.Fix, leak) {
				t.Errorf("check %s speaks of %q: %s; %s", c.Requirement, leak, c.Detail, c.Fix)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("refused requirements\n got %q\nwant %q (every one, in file order)", got, want)
	}
	codes := map[string]string{}
	for _, c := range adm.Checks {
		codes[c.Requirement] = c.Code
	}
	if codes["services.web.labels"] != "reserved-label" || codes["services.db.ports[0]"] != "interpolation" ||
		codes["services.web.frobnicate"] != "unknown-key" || codes["services.web.scale"] != "unmodelled" {
		t.Errorf("codes: %v", codes)
	}
	// The text answer: the count line and one line per requirement.
	code, out, _ = e.pack("admit", compose, "--actor", "range-op")
	if code != exitRefused || !strings.Contains(out, "services.web.scale") || !strings.Contains(out, "services.db.x-notes") || !strings.Contains(out, "fix:") {
		t.Errorf("text admit: exit %d\n%s", code, out)
	}
	// grant issue refuses exactly the same, naming every requirement.
	code, _, errs = e.pack("grant", "issue", compose, "--actor", "range-op")
	if code != exitRefused || !strings.Contains(errs, "services.web.scale") || !strings.Contains(errs, "services.db.runtime") {
		t.Errorf("grant issue: exit %d\n%s", code, errs)
	}
	// version: is obsolete: accepted, as compose accepts it, and noted.
	code, out, errs = e.pack("admit", noted, "--actor", "range-op", "--json")
	adm = api.PackAdmitResponse{}
	if code != 0 || json.Unmarshal([]byte(out), &adm) != nil || !adm.Admitted {
		t.Fatalf("version admit: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	i := slices.IndexFunc(adm.Checks, func(c api.Check) bool { return c.Requirement == "version" })
	if i < 0 || adm.Checks[i].Verdict != "chosen" || adm.Checks[i].Code != "obsolete-ignored" || !strings.Contains(adm.Checks[i].Detail, "3.8") {
		t.Errorf("version is not noted: %+v", adm.Checks)
	}
	// The caps on services and YAML nodes are per-requirement refusals too.
	var many, nodes strings.Builder
	many.WriteString("name: many\nservices:\n")
	for i := range 65 {
		fmt.Fprintf(&many, "  s%d: {image: x}\n", i)
	}
	nodes.WriteString("name: nodes\nservices:\n")
	for i := range 26 {
		fmt.Fprintf(&nodes, "  s%d:\n    image: x\n    command:\n", i)
		for range 200 {
			nodes.WriteString("      - x\n")
		}
	}
	for _, c := range []struct{ file, body, req string }{
		{"many.compose.yaml", many.String(), "services"},
		{"nodes.compose.yaml", nodes.String(), "pack"},
	} {
		code, out, errs = e.pack("admit", e.write("sample/"+c.file, c.body), "--actor", "range-op", "--json")
		adm = api.PackAdmitResponse{}
		if code != exitRefused || json.Unmarshal([]byte(out), &adm) != nil || len(adm.Checks) != 1 ||
			adm.Checks[0].Code != "too-large" || adm.Checks[0].Requirement != c.req || adm.Checks[0].Fix == "" {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", c.file, code, out, errs)
		}
	}
}

// TestPackProfilesAndProjectNameFlags: pack admit's --profile and
// --project-name reach admission: without them the plan holds the
// services without profiles and is named after the file's directory;
// with them it holds the selected profile's service too, binds the
// selection and takes the operator's name.
func TestPackProfilesAndProjectNameFlags(t *testing.T) {
	e := startPackEnv(t)
	prof := e.write("sample/prof.compose.yaml", fmt.Sprintf("services:\n  web:\n    image: %[1]s\n    networks: [inner]\n"+
		"  dbg:\n    image: %[1]s\n    profiles: [debug]\n    networks: [inner]\nnetworks:\n  inner:\n    internal: true\n", dockertest.ImageRef))
	for _, tc := range []struct {
		args          []string
		services      int
		project, from string
		profiles      []string
	}{
		{nil, 1, "sample", "directory", nil},
		{[]string{"--profile", "debug", "--project-name", "shop"}, 2, "shop", "project-name", []string{"debug"}},
	} {
		code, out, errs := e.pack(append([]string{"admit", prof, "--actor", "range-op", "--operator", "--json"}, tc.args...)...)
		var adm api.PackAdmitResponse
		var plan struct {
			Project, ProjectFrom string
			Profiles             []string
			Services             []struct{ Name string }
		}
		if code != exitOK || json.Unmarshal([]byte(out), &adm) != nil || json.Unmarshal(adm.Plan, &plan) != nil {
			t.Fatalf("admit %v: exit %d\nstdout: %s\nstderr: %s", tc.args, code, out, errs)
		}
		if len(plan.Services) != tc.services || plan.Project != tc.project || plan.ProjectFrom != tc.from || !slices.Equal(plan.Profiles, tc.profiles) {
			t.Errorf("admit %v: plan %+v", tc.args, plan)
		}
	}
}
