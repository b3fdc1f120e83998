package strictyaml

import (
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Problem is one reason a document is refused.
type Problem struct {
	// Field locates the value: a Go-style path such as "inputs[1].target"
	// for semantic checks, or a JSON pointer such as "/inputs/1/target" for
	// schema violations.
	Field string
	// Reason says what is wrong with the value.
	Reason string
	// Fix says what to change.
	Fix string
}

func (p Problem) String() string {
	field := p.Field
	if field == "" {
		field = "(document)"
	}
	return field + ": " + p.Reason + "; fix: " + p.Fix
}

// ValidationError lists every problem found in a document, so that one round
// of edits can fix them all.
type ValidationError struct {
	// Subject names the document kind; it starts every line of Error.
	Subject  string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	prefix := ""
	if e.Subject != "" {
		prefix = e.Subject + ": "
	}
	if len(e.Problems) == 0 {
		return prefix + "invalid"
	}
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = prefix + p.String()
	}
	return strings.Join(lines, "\n")
}

// schemaProblems turns a schema validation failure into one Problem per
// failed leaf, sorted by field so the output is stable.
func (p *Parser) schemaProblems(verr *jsonschema.ValidationError) []Problem {
	var ps []Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		loc := pointer(e.InstanceLocation)
		if len(e.Causes) == 0 {
			// DetailedOutput of a leaf carries its message in English.
			ps = append(ps, p.schemaProblem(loc, e.ErrorKind, e.DetailedOutput().Error.String())...)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	slices.SortStableFunc(ps, func(a, b Problem) int { return strings.Compare(a.Field, b.Field) })
	return ps
}

// schemaProblem explains one schema failure at the JSON pointer loc. Missing
// and unknown fields get one Problem each, located by their own pointer.
func (p *Parser) schemaProblem(loc string, k jsonschema.ErrorKind, msg string) []Problem {
	switch k := k.(type) {
	case *kind.Required:
		ps := make([]Problem, len(k.Missing))
		for i, name := range k.Missing {
			ps[i] = Problem{loc + "/" + escapePointer(name), "required field is missing", fmt.Sprintf("add %q", name)}
		}
		return ps
	case *kind.AdditionalProperties:
		key, free := p.format.Keys[loc]
		ps := make([]Problem, len(k.Properties))
		for i, name := range k.Properties {
			ps[i] = Problem{loc + "/" + escapePointer(name), fmt.Sprintf("unknown field %q", name), "remove it or correct its spelling"}
			if free {
				ps[i].Reason = fmt.Sprintf("%q is not a valid %s", name, key.Noun)
				ps[i].Fix = key.Fix
			}
		}
		return ps
	case *kind.Type:
		return []Problem{{loc, msg, "write a value of type " + strings.Join(k.Want, " or ")}}
	case *kind.Const:
		return []Problem{{loc, msg, fmt.Sprintf("set it to %v", k.Want)}}
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		return []Problem{{loc, msg, "use one of " + strings.Join(want, ", ")}}
	case *kind.Pattern:
		fix, ok := p.format.Patterns[k.Want]
		if !ok {
			fix = "write a value matching " + k.Want
		}
		return []Problem{{loc, msg, fix}}
	case *kind.Minimum:
		return []Problem{{loc, msg, "use a value of at least " + k.Want.RatString()}}
	case *kind.ExclusiveMinimum:
		return []Problem{{loc, msg, "use a value greater than " + k.Want.RatString()}}
	}
	return []Problem{{loc, msg, "see the " + p.format.SchemaName}}
}

// pointer joins reference tokens into a JSON pointer (RFC 6901).
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

// escapePointer escapes one JSON pointer reference token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
