package qualification

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/vm/vmpin"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
)

// maxVMConfig bounds the vm section qualify reads (a few pinned paths).
const maxVMConfig = 64 << 10

// vmSection checks that data is a YAML document holding only custodyd's
// vm section (vm: {qemu, kernel, modules, init, accel, uid}) and returns
// it re-encoded, to be appended to the private daemon's config; the
// daemon decodes it strictly and re-checks every pinned digest.
func vmSection(data []byte) (string, error) {
	if len(data) > maxVMConfig {
		return "", fmt.Errorf("the vm configuration is %d bytes; at most %d", len(data), maxVMConfig)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return "", fmt.Errorf("the vm configuration: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return "", errors.New("the vm configuration holds more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return "", errors.New("the vm configuration is empty")
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode || len(m.Content) != 2 || m.Content[0].Value != "vm" || m.Content[1].Kind != yaml.MappingNode {
		return "", errors.New("the vm configuration must hold exactly one key, vm: a mapping (qemu, kernel, modules, init by path and sha256; accel), as in custodyd's config")
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("the vm configuration: %w", err)
	}
	return string(out), nil
}

// vmSectionConfig is the vm section of data (see vmSection) as custodyd's
// config holds it, decoded as strictly as custodyd decodes it.
func vmSectionConfig(data []byte) (*config.VMConfig, error) {
	section, err := vmSection(data)
	if err != nil {
		return nil, err
	}
	var cfg struct {
		VM *config.VMConfig `yaml:"vm"`
	}
	dec := yaml.NewDecoder(strings.NewReader(section))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("the vm configuration: %w", err)
	}
	return cfg.VM, nil
}

// VMPlatform describes this host as the vm backend runs on it with the
// pinned artifacts of vmConfig (custodyd's vm section): the host facts of
// prof, and as the runtime the backend's identity, probed as custodyd
// probes it (each pin re-hashed, QEMU's version read, and under accel auto
// a KVM probe guest booted with a timeout). It creates nothing.
func VMPlatform(ctx context.Context, prof *platform.Profile, vmConfig []byte) (matrix.Platform, error) {
	cfg, err := vmSectionConfig(vmConfig)
	if err != nil {
		return matrix.Platform{}, err
	}
	rt, err := vmpin.Probe(ctx, cfg.Config, nil)
	if err != nil {
		return matrix.Platform{}, fmt.Errorf("probe the vm runtime: %w", err)
	}
	return BackendPlatform(prof, string(backend.KindVM), Pinned{Path: rt.Path, Version: rt.Version, SHA256: rt.SHA256})
}
