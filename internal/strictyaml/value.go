package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"go.yaml.in/yaml/v3"
)

// decodeValue parses data, of at most maxSize bytes, as exactly one YAML
// document and returns it as the plain values (map[string]any, []any,
// string, numbers, bool, nil) that the schema validator understands.
func decodeValue(data []byte, maxSize int) (any, error) {
	if len(data) > maxSize {
		return nil, fmt.Errorf("document is %d bytes; the limit is %d", len(data), maxSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty document")
		}
		return nil, err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, err
	default:
		return nil, fmt.Errorf("line %d: a second YAML document; fix: put exactly one document in the file", next.Line)
	}
	return nodeValue(&root)
}

// nodeValue converts a YAML node to a plain value, refusing the YAML features
// a configuration document has no use for: anchors and aliases (they let a
// small file expand exponentially when decoded), merge keys, non-string or
// duplicate keys, custom tags and non-finite numbers.
func nodeValue(n *yaml.Node) (any, error) {
	if n.Anchor != "" {
		return nil, fmt.Errorf("line %d: anchor &%s is not allowed; fix: write the value out in full", n.Line, n.Anchor)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return nodeValue(n.Content[0])
	case yaml.AliasNode:
		return nil, fmt.Errorf("line %d: alias *%s is not allowed; fix: write the value out in full", n.Line, n.Value)
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, err := mappingKey(n.Content[i])
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("line %d: key %q appears twice; fix: keep one", n.Content[i].Line, k)
			}
			if m[k], err = nodeValue(n.Content[i+1]); err != nil {
				return nil, err
			}
		}
		return m, nil
	case yaml.ScalarNode:
		return scalarValue(n)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
}

func mappingKey(k *yaml.Node) (string, error) {
	if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
		return "", fmt.Errorf("line %d: merge key << is not allowed; fix: write the fields out in full", k.Line)
	}
	if _, err := nodeValue(k); err != nil {
		return "", err
	}
	if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
		return "", fmt.Errorf("line %d: key %q is not a string; fix: quote it", k.Line, k.Value)
	}
	return k.Value, nil
}

func scalarValue(n *yaml.Node) (any, error) {
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp":
		// Timestamps stay strings, as they do in a typed decode into a
		// string field; JSON Schema has no time type.
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool", "!!int":
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
		return v, nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		// The schema validator compares numbers as exact rationals, which
		// NaN and infinities are not.
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("line %d: %s is not a finite number", n.Line, n.Value)
		}
		return f, nil
	default:
		return nil, fmt.Errorf("line %d: tag %s is not allowed; fix: remove the tag", n.Line, tag)
	}
}
