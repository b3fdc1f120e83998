package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/custody-dev/custody/egress"
	cdsse "github.com/custody-dev/custody/internal/dsse"
)

const digestPrefix = "sha256:"

// maxTextField bounds free-text fields (actor, stage, names, paths).
const maxTextField = 4096

// validate checks every field of p and returns the phase's name. It fills
// nothing in: a zero or inconsistent field is an error.
func validate(p *Predicate) (phaseName string, err error) {
	var problems []string
	add, text, digest := fieldChecks(&problems)

	checkBinding(&problems, p.ID, p.Actor, p.NotBefore, p.Expires, p.PolicyDigest, p.Runner.ID)
	text("stage", p.Stage)
	text("runtime.version", p.Runtime.Version)
	if !cdsse.IsHex64(p.Runtime.SHA256) {
		add("runtime.sha256", "%q is not 64 lowercase hex digits", p.Runtime.SHA256)
	}
	digest("image", p.Image)
	if r := p.ImageRef; r != nil {
		digest("imageRef.config", r.Config)
		if r.Manifest != "" {
			digest("imageRef.manifest", r.Manifest)
		}
	}
	if pr := p.Process; pr != nil {
		if len(pr.Command) == 0 {
			add("process.command", "is empty")
		}
		if !strings.HasPrefix(pr.Workdir, "/") {
			add("process.workdir", "%q is not an absolute path", pr.Workdir)
		}
		for k := range pr.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				add("process.env", "%q is not a variable name", k)
			}
		}
	}
	text("target.os", p.Target.OS)
	text("target.arch", p.Target.Arch)
	if p.Toolchain != "" {
		text("toolchain", p.Toolchain)
	}

	targets := make(map[string]bool, len(p.Inputs.Entries))
	for i, e := range p.Inputs.Entries {
		field := fmt.Sprintf("inputs.entries[%d]", i)
		text(field+".source", e.Source)
		if !strings.HasPrefix(e.Target, "/") {
			add(field+".target", "%q is not an absolute path", e.Target)
		} else {
			text(field+".target", e.Target)
		}
		if targets[e.Target] {
			add(field+".target", "%q appears twice", e.Target)
		}
		targets[e.Target] = true
		digest(field+".digest", e.Digest)
	}
	if want := ClosureDigest(p.Inputs.Entries); p.Inputs.ClosureDigest != want {
		add("inputs.closureDigest", "%q is not the closure digest of the entries (%s)", p.Inputs.ClosureDigest, want)
	}

	if !strings.HasPrefix(p.Output.Path, "/") {
		add("output.path", "%q is not an absolute path", p.Output.Path)
	} else {
		text("output.path", p.Output.Path)
	}
	if p.Output.MaxBytes <= 0 {
		add("output.maxBytes", "%d is not positive", p.Output.MaxBytes)
	}
	if p.Output.MaxFiles < 0 {
		add("output.maxFiles", "%d is negative", p.Output.MaxFiles)
	}

	r := p.Resources
	if r.Memory <= 0 {
		add("resources.memory", "%d is not positive", r.Memory)
	}
	if r.Pids <= 0 {
		add("resources.pids", "%d is not positive", r.Pids)
	}
	if math.IsNaN(r.CPU) || math.IsInf(r.CPU, 0) || r.CPU < 0 {
		add("resources.cpu", "%v is not a finite non-negative number of cores", r.CPU)
	}
	if r.WallTimeMillis <= 0 {
		add("resources.wallTimeMillis", "%d is not positive", r.WallTimeMillis)
	}
	if r.TmpBytes < 0 {
		add("resources.tmpBytes", "%d is negative", r.TmpBytes)
	}

	switch p.Egress.Mode {
	case EgressDeny:
		if len(p.Egress.Destinations) != 0 || len(p.Egress.Inspect) != 0 {
			add("egress.destinations", "must be empty, with egress.inspect, when egress is %q", EgressDeny)
		}
	case EgressRestricted:
		if len(p.Egress.Destinations) == 0 {
			add("egress.destinations", "is empty; restricted egress names its destinations")
		}
		dests := map[string]bool{}
		for i, d := range p.Egress.Destinations {
			if _, err := egress.ParseDestination(d); err != nil {
				add(fmt.Sprintf("egress.destinations[%d]", i), "%v", err)
			} else if dests[d] {
				add(fmt.Sprintf("egress.destinations[%d]", i), "%q appears twice", d)
			}
			dests[d] = true
		}
		for i, d := range p.Egress.Inspect {
			if !dests[d] {
				add(fmt.Sprintf("egress.inspect[%d]", i), "%q is not one of egress.destinations", d)
			}
		}
	default:
		add("egress.mode", "%q is not %q or %q", p.Egress.Mode, EgressDeny, EgressRestricted)
	}

	creds := make(map[string]bool, len(p.Credentials))
	for i, c := range p.Credentials {
		field := fmt.Sprintf("credentials[%d]", i)
		text(field, c)
		if creds[c] {
			add(field, "%q appears twice", c)
		}
		creds[c] = true
	}

	if len(p.Brokered) != 0 && len(p.Brokered) != len(p.Credentials) {
		add("brokered", "binds %d credentials, the grant names %d", len(p.Brokered), len(p.Credentials))
	}
	for i, b := range p.Brokered {
		field := fmt.Sprintf("brokered[%d]", i)
		if i < len(p.Credentials) && b.Name != p.Credentials[i] {
			add(field+".name", "%q is not credentials[%d] %q", b.Name, i, p.Credentials[i])
		}
		if _, err := egress.ParseDestination(b.Destination); err != nil {
			add(field+".destination", "%v", err)
		}
		if b.Form != "" && b.Form != egress.FormIntercept {
			add(field+".form", "%q is not a credential form (omit it for the gateway form, or %q)", b.Form, egress.FormIntercept)
		}
		for k, q := range b.Requests {
			if _, err := egress.ParseRequest(q); err != nil {
				add(fmt.Sprintf("%s.requests[%d]", field, k), "%v", err)
			}
		}
	}

	phaseName, err = checkPhase(p.Phase)
	if err != nil {
		add("phase", "%v", err)
	}

	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "; "))
	}
	return phaseName, nil
}

// fieldChecks returns checks that append to *problems a problem naming
// the field: add records one; text refuses empty or unprintable text and
// digest anything but "sha256:<64 lowercase hex>".
func fieldChecks(problems *[]string) (add func(field, format string, args ...any), text, digest func(field, s string)) {
	add = func(field, format string, args ...any) {
		*problems = append(*problems, field+": "+fmt.Sprintf(format, args...))
	}
	text = func(field, s string) {
		if err := cdsse.CheckText(s, maxTextField, false); err != nil {
			add(field, "%v", err)
		}
	}
	digest = func(field, s string) {
		if !cdsse.IsDigest(s) {
			add(field, "%q is not a sha256:<64 lowercase hex> digest", s)
		}
	}
	return add, text, digest
}

// checkBinding checks the fields every kind of grant has: its id, actor,
// validity window, policy digest and runner.
func checkBinding(problems *[]string, id, actor string, notBefore, expires time.Time, policyDigest, runnerID string) {
	add, text, digest := fieldChecks(problems)
	if len(id) != 32 || !cdsse.IsLowerHex(id) {
		add("id", "%q is not 32 lowercase hex digits", id)
	}
	text("actor", actor)
	switch {
	case notBefore.IsZero():
		add("notBefore", "missing")
	case expires.IsZero():
		add("expires", "missing")
	case !notBefore.Before(expires):
		add("expires", "%s is not after notBefore %s", expires.Format(timeFormat), notBefore.Format(timeFormat))
	}
	digest("policyDigest", policyDigest)
	digest("runner.id", runnerID)
}

const timeFormat = "2006-01-02T15:04:05.999999999Z07:00"

// isPhaseName reports whether s is a valid phase request name,
// ^[a-z0-9][a-z0-9._-]{0,62}$ (the request package's rule).
func isPhaseName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// checkPhase checks that phase is a compact JSON object with no duplicate
// top-level member and a "name" member that is a valid phase name, and
// returns the name.
func checkPhase(phase json.RawMessage) (string, error) {
	var name *string
	err := compactObject(phase, func(key string, v json.RawMessage) error {
		if key == "name" {
			var s string
			if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
				return errors.New(`"name" is not a string`)
			}
			name = &s
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if name == nil {
		return "", errors.New(`no "name" member`)
	}
	if !isPhaseName(*name) {
		return "", fmt.Errorf("name %q is not a valid phase name", *name)
	}
	return *name, nil
}

// compactObject checks that doc is a compact JSON object (no
// insignificant whitespace) with no duplicate top-level member, calling
// member, if not nil, with each top-level member in order.
func compactObject(doc json.RawMessage, member func(key string, v json.RawMessage) error) error {
	if len(doc) == 0 || doc[0] != '{' {
		return errors.New("not a JSON object")
	}
	if !cdsse.IsCompactJSON(doc) {
		// The slow path only words the refusal.
		var compact bytes.Buffer
		if err := json.Compact(&compact, doc); err != nil {
			return fmt.Errorf("not valid JSON: %w", err)
		}
		return errors.New("not in compact form (it holds insignificant whitespace)")
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	if _, err := dec.Token(); err != nil { // '{', checked above
		return err
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if seen[key] {
			return fmt.Errorf("member %q appears twice", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		if member != nil {
			if err := member(key, v); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	return nil
}
