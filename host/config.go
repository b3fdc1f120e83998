package host

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// Config is the runner's own configuration, owned by the operator.
type Config struct {
	// StateDir is private (0700): images, snapshots, outputs, the store
	// and the runtime's container state.
	StateDir string `yaml:"stateDir"`
	// RuntimeDir holds per-launch bundles (0711; each launch dir is closed
	// to every host user but root and the container's mapped root).
	RuntimeDir string `yaml:"runtimeDir"`
	// Runtime is the pinned OCI runtime; its sha256 is checked at every launch.
	Runtime Runtime `yaml:"runtime"`
	// Gate is the custody-gate binary every container starts with; empty
	// means custody-gate beside the runtime binary. Its digest is recorded
	// in each receipt.
	Gate string `yaml:"gate,omitempty"`
	// UserNamespace maps container root to an unprivileged host range. If
	// omitted, a default range is used where the host proves user
	// namespaces work.
	UserNamespace *IDRange `yaml:"userNamespace,omitempty"`
	// Faults, when set (only by fault-injection builds), is called at each
	// stage boundary of a launch.
	Faults func(stage string) `yaml:"-"`
	// PidfdNetnsFault, set only by tests, makes the platform probe report
	// pidfd-netns disproved with this detail: it can only take restricted
	// egress away.
	PidfdNetnsFault string `yaml:"-"`
}

// Runtime names the runtime binary the operator pinned: where it is, which
// version it is and the sha256 of its bytes. A run's Result records it
// (the JSON names are the run record's).
type Runtime struct {
	Path    string `yaml:"path" json:"path"`
	Version string `yaml:"version" json:"version"`
	SHA256  string `yaml:"sha256" json:"sha256"`
}

// IDRange is a host uid/gid range for container ids 0..Size-1.
type IDRange struct {
	HostID uint32 `yaml:"hostID"`
	Size   uint32 `yaml:"size"`
}

// LoadConfig reads a runner config strictly: unknown fields are errors.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runner config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("runner config %s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("runner config %s: %w", path, err)
	}
	return &c, nil
}

func (c *Config) validate() error {
	switch {
	case !filepath.IsAbs(c.StateDir):
		return fmt.Errorf("stateDir %q must be an absolute path", c.StateDir)
	case !filepath.IsAbs(c.RuntimeDir):
		return fmt.Errorf("runtimeDir %q must be an absolute path", c.RuntimeDir)
	case !filepath.IsAbs(c.Runtime.Path):
		return fmt.Errorf("runtime.path %q must be an absolute path", c.Runtime.Path)
	case len(c.Runtime.SHA256) != 64:
		return fmt.Errorf("runtime.sha256 must be the 64-hex sha256 of the pinned runtime binary")
	case c.Gate != "" && !filepath.IsAbs(c.Gate):
		return fmt.Errorf("gate %q must be an absolute path", c.Gate)
	case c.Runtime.Version == "":
		return fmt.Errorf("runtime.version is required")
	case c.UserNamespace != nil && (c.UserNamespace.HostID == 0 || c.UserNamespace.Size < 65536):
		return fmt.Errorf("userNamespace must map to a non-root host range of at least 65536 ids")
	}
	return nil
}
