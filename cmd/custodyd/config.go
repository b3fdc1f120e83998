package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/vm/vmpin"
	"github.com/custody-dev/custody/runner"
)

// Config is custodyd's configuration, owned by the operator.
type Config struct {
	Runner runner.Config `yaml:"runner"`
	// Policy is the operator policy file; it is re-read on reload.
	Policy string `yaml:"policy"`
	// ControlSocket is for operators only (0600, peer uid checked).
	ControlSocket string `yaml:"controlSocket"`
	// SubmitSocket is for clients: submit, watch and cancel their own
	// runs, fetch results (0666, peer uid recorded).
	SubmitSocket string `yaml:"submitSocket"`
	// Operators are the uids allowed on the control socket.
	Operators []uint32 `yaml:"operators"`
	// TrustedIssuers are extra grant-issuer public keys (PEM files) the
	// runner accepts besides its own issuer key.
	TrustedIssuers []string `yaml:"trustedIssuers,omitempty"`
	// MaxGrantTTL bounds the validity of issued grants; default 24h.
	MaxGrantTTL string `yaml:"maxGrantTTL,omitempty"`
	// Retention says how long run records (with their receipts) and
	// retained outputs are kept (R12). Explicit, with defaults.
	Retention Retention `yaml:"retention,omitempty"`
	// Docker enables packs (compose scenarios on a local Docker engine);
	// without it every pack endpoint refuses, naming this section.
	Docker *DockerConfig `yaml:"docker,omitempty"`
	// Egress enables restricted egress and the credential broker for
	// phases (see EgressConfig); absent, both are refused.
	Egress *EgressConfig `yaml:"egress,omitempty"`
	// Backends are the phase backends the runner has: oci (runc, always
	// first and the default) and optionally vm (a microVM per phase,
	// configured in VM). Absent means [oci].
	Backends []string `yaml:"backends,omitempty"`
	// VM pins the vm backend's QEMU, guest kernel, kernel modules and init.
	VM *VMConfig `yaml:"vm,omitempty"`
	// SubmitLimits bound the work each uid gets on the submit socket.
	SubmitLimits SubmitLimits `yaml:"submitLimits,omitempty"`
}

// VMConfig is the vm backend: each artifact by path and sha256 (the
// modules' digest is vmpin.ModulesDigest of their directory), re-checked at
// every launch.
type VMConfig struct {
	// The section's fields are vmpin.Config's, which custody gate reads too.
	vmpin.Config `yaml:",inline"`
}

func (v *VMConfig) validate() error {
	for name, p := range map[string]vmpin.Pinned{"qemu": v.QEMU, "kernel": v.Kernel, "modules": v.Modules, "init": v.Init, "stage": v.Stage} {
		// An empty stage path is custody-vmstage beside the init; its
		// digest is pinned all the same.
		if (name != "stage" || p.Path != "") && !filepath.IsAbs(p.Path) {
			return fmt.Errorf("vm.%s.path %q must be an absolute path", name, p.Path)
		}
		if len(p.SHA256) != 64 || strings.Trim(p.SHA256, "0123456789abcdef") != "" {
			return fmt.Errorf("vm.%s.sha256 %q must be 64 lowercase hex digits; fix: pin it with the sha256 of the reviewed file (sha256sum; the stage is bin/custody-vmstage, beside the init unless its path is set)", name, p.SHA256)
		}
	}
	switch v.Accel {
	case "", "auto", "kvm", "tcg":
	default:
		return fmt.Errorf("vm.accel %q: want auto, kvm or tcg", v.Accel)
	}
	return v.CheckIDs()
}

// Retention is the keep-for policy of run records and outputs.
type Retention struct {
	// Receipts: run records and their signed receipts; default 720h.
	Receipts string `yaml:"receipts,omitempty"`
	// Outputs: retained output trees no longer referenced by a kept run
	// record; default 168h. Outputs of kept runs are kept with them.
	Outputs string `yaml:"outputs,omitempty"`
}

func loadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	c := Config{ControlSocket: api.DefaultControlSocket, SubmitSocket: api.DefaultSubmitSocket, MaxGrantTTL: "24h",
		Retention: Retention{Receipts: "720h", Outputs: "168h"}}
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if c.Docker != nil && c.Docker.SubnetPool == "" {
		c.Docker.SubnetPool = defaultSubnetPool
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &c, nil
}

func (c *Config) validate() error {
	for name, p := range map[string]string{"policy": c.Policy, "controlSocket": c.ControlSocket, "submitSocket": c.SubmitSocket} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%s %q must be an absolute path", name, p)
		}
	}
	if c.ControlSocket == c.SubmitSocket {
		return fmt.Errorf("controlSocket and submitSocket must differ")
	}
	if len(c.Operators) == 0 {
		return fmt.Errorf("operators: name at least one uid allowed on the control socket")
	}
	if err := c.validateBackends(); err != nil {
		return err
	}
	if c.Egress != nil {
		if err := c.Egress.validate(); err != nil {
			return err
		}
	}
	if c.Docker != nil {
		return c.Docker.validate()
	}
	return nil
}

func (c *Config) validateBackends() error {
	if len(c.Backends) > 0 && c.Backends[0] != string(backend.KindOCI) {
		return fmt.Errorf("backends %v: oci comes first (it is the default backend)", c.Backends)
	}
	seen := map[string]bool{}
	for _, b := range c.Backends {
		switch {
		case seen[b]:
			return fmt.Errorf("backends %v: %s is listed twice", c.Backends, b)
		case b == string(backend.KindVM) && c.VM == nil:
			return fmt.Errorf("backends lists vm but there is no vm section; fix: add vm: {qemu, kernel, modules, init} each with path and sha256")
		case b != string(backend.KindOCI) && b != string(backend.KindVM):
			return fmt.Errorf("backends %v: %q is not a backend (oci, vm)", c.Backends, b)
		}
		seen[b] = true
	}
	if c.VM != nil {
		if !seen[string(backend.KindVM)] {
			return fmt.Errorf("a vm section is configured but backends does not list vm; fix: backends: [oci, vm]")
		}
		return c.VM.validate()
	}
	return nil
}
