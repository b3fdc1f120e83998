// Package schemadoc renders a JSON Schema (draft 2020-12, as custody's own
// schemas use it) as a Markdown reference page: one table row per field,
// with its type, whether it is required, its constraints and its
// description. The reference pages under docs/reference/schemas are made
// by it, so a field documented there is a field the schema has.
package schemadoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// node is the part of a JSON Schema the page shows.
type node struct {
	Ref                  string           `json:"$ref"`
	Title                string           `json:"title"`
	Description          string           `json:"description"`
	Type                 json.RawMessage  `json:"type"`
	Const                json.RawMessage  `json:"const"`
	Enum                 []any            `json:"enum"`
	Default              json.RawMessage  `json:"default"`
	Properties           map[string]*node `json:"properties"`
	Required             []string         `json:"required"`
	PatternProperties    map[string]*node `json:"patternProperties"`
	AdditionalProperties json.RawMessage  `json:"additionalProperties"`
	Items                *node            `json:"items"`
	PrefixItems          []*node          `json:"prefixItems"`
	OneOf                []*node          `json:"oneOf"`
	AnyOf                []*node          `json:"anyOf"`
	Defs                 map[string]*node `json:"$defs"`
	Pattern              string           `json:"pattern"`
	Minimum              *float64         `json:"minimum"`
	Maximum              *float64         `json:"maximum"`
	ExclusiveMinimum     *float64         `json:"exclusiveMinimum"`
	MinItems             *int             `json:"minItems"`
	MaxItems             *int             `json:"maxItems"`
	MinLength            *int             `json:"minLength"`
	MaxLength            *int             `json:"maxLength"`
	UniqueItems          bool             `json:"uniqueItems"`
	// never is the schema false: a property that may not appear.
	never bool
}

// UnmarshalJSON reads a boolean schema too: false allows nothing (a
// property so marked is not a field), true anything.
func (n *node) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "false":
		*n = node{never: true}
		return nil
	case "true":
		*n = node{}
		return nil
	}
	type plain node
	return json.Unmarshal(b, (*plain)(n))
}

type row struct{ path, typ, required, desc string }

type renderer struct {
	defs map[string]*node
	rows []row
	// seen guards against a $ref that refers back to itself.
	seen map[string]bool
}

// Markdown renders schema as a page titled title; command is the custody
// command that prints the schema.
func Markdown(title, command string, schema []byte) ([]byte, error) {
	var root node
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("schemadoc: %s: %w", title, err)
	}
	r := &renderer{defs: root.Defs, seen: map[string]bool{}}
	if err := r.object("", &root); err != nil {
		return nil, fmt.Errorf("schemadoc: %s: %w", title, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", title)
	fmt.Fprintf(&b, "<!-- Generated from the JSON Schema by make docs; do not edit. -->\n\n")
	if root.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", root.Description)
	}
	fmt.Fprintf(&b, "The JSON Schema itself: `%s`. A field not listed here is refused.\n\n", command)
	b.WriteString("| field | type | required | description |\n| --- | --- | --- | --- |\n")
	for _, rw := range r.rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", rw.path, cell(rw.typ), rw.required, cell(rw.desc))
	}
	return b.Bytes(), nil
}

// cell keeps a value on one table row.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// resolve follows a local $ref, merging the referring node's own
// description over the target's.
func (r *renderer) resolve(n *node) (*node, string, error) {
	if n == nil || n.Ref == "" {
		return n, "", nil
	}
	name, ok := strings.CutPrefix(n.Ref, "#/$defs/")
	if !ok {
		return nil, "", fmt.Errorf("$ref %q: only local #/$defs references are rendered", n.Ref)
	}
	d, ok := r.defs[name]
	if !ok {
		return nil, "", fmt.Errorf("$ref %q: no such definition", n.Ref)
	}
	merged := *d
	if n.Description != "" {
		merged.Description = n.Description
	}
	return &merged, name, nil
}

// object adds a row per property of n (and of its alternatives), under
// prefix.
func (r *renderer) object(prefix string, n *node) error {
	names := make([]string, 0, len(n.Properties))
	for k, p := range n.Properties {
		if p.never {
			continue
		}
		names = append(names, k)
	}
	sort.SliceStable(names, func(i, j int) bool { return order(n, names[i]) < order(n, names[j]) })
	for _, k := range names {
		req := "no"
		for _, q := range n.Required {
			if q == k {
				req = "yes"
			}
		}
		if err := r.field(join(prefix, k), n.Properties[k], req); err != nil {
			return err
		}
	}
	pats := make([]string, 0, len(n.PatternProperties))
	for k := range n.PatternProperties {
		pats = append(pats, k)
	}
	sort.Strings(pats)
	for _, p := range pats {
		if err := r.field(join(prefix, "<name>"), n.PatternProperties[p], "no"); err != nil {
			return err
		}
		r.rows[len(r.rows)-1].desc = strings.TrimSpace(r.rows[len(r.rows)-1].desc + " Names match `" + p + "`.")
	}
	if len(n.AdditionalProperties) > 0 && n.AdditionalProperties[0] == '{' {
		var ap node
		if err := json.Unmarshal(n.AdditionalProperties, &ap); err != nil {
			return err
		}
		if err := r.field(join(prefix, "<name>"), &ap, "no"); err != nil {
			return err
		}
	}
	for _, alts := range [][]*node{n.OneOf, n.AnyOf} {
		for _, alt := range alts {
			a, name, err := r.resolve(alt)
			if err != nil {
				return err
			}
			if len(a.Properties) == 0 || r.seen[name] && name != "" {
				continue
			}
			r.seen[name] = name != ""
			if err := r.object(prefix, a); err != nil {
				return err
			}
			r.seen[name] = false
		}
	}
	return nil
}

// order keeps required properties first, each group alphabetical.
func order(n *node, k string) string {
	for _, q := range n.Required {
		if q == k {
			return "0" + k
		}
	}
	return "1" + k
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

// field adds the row of one field, then the rows of what it holds.
func (r *renderer) field(path string, n *node, req string) error {
	n, name, err := r.resolve(n)
	if err != nil {
		return err
	}
	if name != "" && r.seen[name] {
		r.rows = append(r.rows, row{path, "(see above)", req, n.Description})
		return nil
	}
	if name != "" {
		r.seen[name] = true
		defer func() { r.seen[name] = false }()
	}
	typ, err := r.typeOf(n)
	if err != nil {
		return err
	}
	r.rows = append(r.rows, row{path, typ, req, describe(n)})
	switch {
	case len(n.Properties) > 0 || len(n.PatternProperties) > 0 || len(n.OneOf) > 0 || len(n.AnyOf) > 0 ||
		len(n.AdditionalProperties) > 0 && n.AdditionalProperties[0] == '{':
		return r.object(path, n)
	case n.Items != nil:
		it, _, err := r.resolve(n.Items)
		if err != nil {
			return err
		}
		if len(it.Properties) > 0 || len(it.OneOf) > 0 || len(it.AnyOf) > 0 {
			if it.Description != "" {
				// What one item is, said once (a pipeline's stage).
				r.rows = append(r.rows, row{path + "[]", "object", "", it.Description})
			}
			return r.object(path+"[]", it)
		}
	}
	return nil
}

// typeOf names a field's type for the table.
func (r *renderer) typeOf(n *node) (string, error) {
	switch {
	case len(n.Const) > 0:
		return "`" + string(n.Const) + "`", nil
	case len(n.Enum) > 0:
		vs := make([]string, len(n.Enum))
		for i, v := range n.Enum {
			b, _ := json.Marshal(v)
			vs[i] = "`" + string(b) + "`"
		}
		return "one of " + strings.Join(vs, ", "), nil
	}
	var alts []*node
	alts = append(alts, n.OneOf...)
	alts = append(alts, n.AnyOf...)
	if len(alts) > 0 && len(n.Type) == 0 {
		var ts []string
		for _, a := range alts {
			ra, _, err := r.resolve(a)
			if err != nil {
				return "", err
			}
			t, err := r.typeOf(ra)
			if err != nil {
				return "", err
			}
			ts = append(ts, t)
		}
		return strings.Join(dedupe(ts), " or "), nil
	}
	var types []string
	if len(n.Type) > 0 {
		if n.Type[0] == '[' {
			if err := json.Unmarshal(n.Type, &types); err != nil {
				return "", err
			}
		} else {
			var t string
			if err := json.Unmarshal(n.Type, &t); err != nil {
				return "", err
			}
			types = []string{t}
		}
	}
	for i, t := range types {
		if t == "array" {
			switch {
			case n.Items != nil:
				it, _, err := r.resolve(n.Items)
				if err != nil {
					return "", err
				}
				et, err := r.typeOf(it)
				if err != nil {
					return "", err
				}
				types[i] = "array of " + et
			case len(n.PrefixItems) > 0:
				types[i] = fmt.Sprintf("array of %d", len(n.PrefixItems))
			}
		}
	}
	if len(types) == 0 {
		return "any", nil
	}
	return strings.Join(types, " or "), nil
}

func dedupe(ss []string) []string {
	var out []string
	for _, s := range ss {
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// describe is a field's description followed by its constraints.
func describe(n *node) string {
	var c []string
	num := func(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%g", f), ".0") }
	if n.Minimum != nil {
		c = append(c, "at least "+num(*n.Minimum))
	}
	if n.ExclusiveMinimum != nil {
		c = append(c, "more than "+num(*n.ExclusiveMinimum))
	}
	if n.Maximum != nil {
		c = append(c, "at most "+num(*n.Maximum))
	}
	if n.MinItems != nil && *n.MinItems > 0 {
		c = append(c, fmt.Sprintf("at least %d item(s)", *n.MinItems))
	}
	if n.MaxItems != nil {
		c = append(c, fmt.Sprintf("at most %d items", *n.MaxItems))
	}
	if n.UniqueItems {
		c = append(c, "no duplicates")
	}
	if n.MinLength != nil && *n.MinLength > 0 {
		c = append(c, fmt.Sprintf("at least %d characters", *n.MinLength))
	}
	if n.MaxLength != nil {
		c = append(c, fmt.Sprintf("at most %d characters", *n.MaxLength))
	}
	// A long pattern (a byte count's, a duration's) says less than the
	// description that comes with it.
	if n.Pattern != "" && (len(n.Pattern) <= 40 || n.Description == "") {
		c = append(c, "matches `"+n.Pattern+"`")
	}
	if len(n.Default) > 0 {
		c = append(c, "default `"+string(n.Default)+"`")
	}
	d := strings.TrimSpace(n.Description)
	if len(c) > 0 {
		if d != "" && !strings.HasSuffix(d, ".") {
			d += "."
		}
		d = strings.TrimSpace(d + " " + strings.ToUpper(strings.Join(c, "; ")[:1]) + strings.Join(c, "; ")[1:] + ".")
	}
	return d
}
