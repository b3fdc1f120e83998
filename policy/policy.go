// Package policy parses and validates operator policy: what the operator
// grants. A policy that does not parse or validate grants nothing; callers
// must refuse every request when Load returns an error.
package policy

import "github.com/custody-dev/custody/quantity"

// APIVersion is the only accepted apiVersion of a policy file.
const APIVersion = "custody.dev/v1alpha1"

// Policy is an operator policy (kind: Policy).
type Policy struct {
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	Kind       string `yaml:"kind" json:"kind"`
	// Images lists the images that may run, by content digest.
	Images []Image `yaml:"images" json:"images"`
	// Ceilings are the largest budgets any request may ask for.
	Ceilings Ceilings `yaml:"ceilings" json:"ceilings"`
	// Defaults fill the open choices a request leaves unset.
	Defaults Defaults `yaml:"defaults" json:"defaults"`
	// Tiers says which tiers the operator enables.
	Tiers Tiers `yaml:"tiers" json:"tiers"`
}

// Image is one allowed image.
type Image struct {
	Digest string `yaml:"digest" json:"digest"` // "sha256:<64 hex>"
	Name   string `yaml:"name,omitempty" json:"name,omitempty"`
}

// Ceilings bound what requests may ask for. Every field is required and
// positive: a policy without a ceiling is a broken policy.
type Ceilings struct {
	Memory      quantity.Bytes    `yaml:"memory" json:"memory"`
	Pids        int64             `yaml:"pids" json:"pids"`
	CPU         float64           `yaml:"cpu" json:"cpu"`
	WallTime    quantity.Duration `yaml:"wallTime" json:"wallTime"`
	OutputBytes quantity.Bytes    `yaml:"outputBytes" json:"outputBytes"`
	TmpBytes    quantity.Bytes    `yaml:"tmpBytes" json:"tmpBytes"`
	// InputBytes bounds the total size of a request's input snapshot.
	InputBytes quantity.Bytes `yaml:"inputBytes" json:"inputBytes"`
}

// Defaults are the open choices admission makes when a request is silent.
// Each must be within the matching ceiling.
type Defaults struct {
	CPU         float64        `yaml:"cpu" json:"cpu"`
	OutputBytes quantity.Bytes `yaml:"outputBytes" json:"outputBytes"`
	TmpBytes    quantity.Bytes `yaml:"tmpBytes" json:"tmpBytes"`
}

// Tiers enables tiers. Production is always allowed by policy (the platform
// must still prove it); development is off unless enabled here.
type Tiers struct {
	// Development enables the unqualified cgroup-v1 development tier.
	Development bool `yaml:"development" json:"development"`
}
