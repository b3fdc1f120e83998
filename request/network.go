package request

import (
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// IsZero reports an absent network (deny), so encodings leave it out.
func (n NetworkRequest) IsZero() bool { return n.Mode == "" && n.Egress == nil }

// UnmarshalYAML takes the string form or the mapping form; the schema has
// already refused anything else.
func (n *NetworkRequest) UnmarshalYAML(v *yaml.Node) error {
	switch v.Kind {
	case yaml.ScalarNode:
		*n = NetworkRequest{Mode: Network(v.Value)}
		return nil
	case yaml.MappingNode:
		var m struct {
			Egress []string `yaml:"egress"`
		}
		if err := v.Decode(&m); err != nil {
			return err
		}
		*n = NetworkRequest{Egress: m.Egress}
		if n.Egress == nil {
			n.Egress = []string{}
		}
		return nil
	}
	return fmt.Errorf("line %d: network must be deny or {egress: [host:port, ...]}", v.Line)
}

// MarshalYAML writes the form that was read.
func (n NetworkRequest) MarshalYAML() (any, error) {
	if n.Egress == nil {
		return string(n.Mode), nil
	}
	return map[string][]string{"egress": n.Egress}, nil
}

// MarshalJSON writes the string form as a string, so a deny request's
// canonical encoding is what it was before the mapping form existed.
func (n NetworkRequest) MarshalJSON() ([]byte, error) {
	if n.Egress == nil {
		return json.Marshal(string(n.Mode))
	}
	return json.Marshal(map[string][]string{"egress": n.Egress})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (n *NetworkRequest) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*n = NetworkRequest{Mode: Network(s)}
		return nil
	}
	var m struct {
		Egress []string `json:"egress"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("request: network: %w", err)
	}
	*n = NetworkRequest{Egress: m.Egress}
	if n.Egress == nil {
		n.Egress = []string{}
	}
	return nil
}
