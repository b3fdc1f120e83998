// Package policy parses and validates operator policy: what the operator
// grants. A policy that does not parse or validate grants nothing; callers
// must refuse every request when Load returns an error.
package policy

import (
	"slices"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/quantity"
)

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
	// Users says which users inside the sandbox a phase may run as.
	Users Users `yaml:"users,omitempty" json:"users,omitempty"`
	// ImageOverrides pins image run defaults a phase may not override.
	ImageOverrides ImageOverrides `yaml:"imageOverrides,omitempty" json:"imageOverrides,omitempty"`
	// Actors says who may run which stages. A policy without actors grants
	// no actor anything.
	Actors []Actor `yaml:"actors" json:"actors"`
	// InputRoots are the absolute, clean host directories under which phase
	// inputs may live. Empty means no input is granted: nothing outside a
	// configured root is ever read. An input is reached from its root
	// without following any symlink (see InputRoot).
	InputRoots []string `yaml:"inputRoots,omitempty" json:"inputRoots,omitempty"`
	// VerifierRoots are the absolute, clean host directories holding
	// private acceptance material (hidden tests, reference answers): only
	// a verifier phase may take an input at or under one, and no other
	// phase may name one, a path under one, or a directory holding one.
	// They are input roots for verifier phases only.
	VerifierRoots []string `yaml:"verifierRoots,omitempty" json:"verifierRoots,omitempty"`
	// Egress is the network the operator allows out, per stage.
	Egress Egress `yaml:"egress,omitempty" json:"egress,omitempty"`
	// Credentials binds the credentials the operator may broker, by name:
	// where the secret is, the one destination it is sent to and how, and
	// which stages may use it. A name is metadata only; the secret stays
	// in its file, which custodyd reads only for a run that uses it.
	Credentials map[string]Credential `yaml:"credentials,omitempty" json:"credentials,omitempty"`
	// Packs is the authority granted to scenario packs (see Packs).
	// Absent, every pack is refused.
	Packs *Packs `yaml:"packs,omitempty" json:"packs,omitempty"`
	// Pool declares warm-pool profiles (see PoolProfile). Absent, every
	// launch is cold.
	Pool []PoolProfile `yaml:"pool,omitempty" json:"pool,omitempty"`
	// Authorizations are standing envelopes within which custodyd mints
	// grants for an actor's submitters (see Authorization). Absent, only
	// hand-issued grants launch.
	Authorizations []Authorization `yaml:"authorizations,omitempty" json:"authorizations,omitempty"`
}

// Actor is one principal and the stages it may run.
type Actor struct {
	// Name identifies the actor, e.g. "ci-bot" or "alice@example.com".
	Name string `yaml:"name" json:"name"`
	// Stages are the stages the actor may run: acquire, generate, build,
	// test or run.
	Stages []string `yaml:"stages" json:"stages"`
	// Submitters are the local peers that may submit a grant issued to
	// this actor, as the kernel reports them on the submit socket
	// (SO_PEERCRED). A name is not an identity: without submitters, a
	// grant for the actor launches nothing, whoever holds the file.
	Submitters Submitters `yaml:"submitters,omitempty" json:"submitters,omitempty"`
}

// Submitters lists peer identities. A peer matches when its uid is in
// UIDs or its primary gid is in GIDs.
type Submitters struct {
	UIDs []uint32 `yaml:"uids,omitempty" json:"uids,omitempty"`
	GIDs []uint32 `yaml:"gids,omitempty" json:"gids,omitempty"`
}

// Egress lists the destinations phases may reach.
type Egress struct {
	// Destinations are "host:port" pairs; host is a DNS name or an IP
	// address (IPv6 in brackets), port is 1 to 65535. They grant nothing
	// (Stages does); the list is kept so that existing policies parse.
	Destinations []string `yaml:"destinations,omitempty" json:"destinations,omitempty"`
	// Stages maps a stage to the exact host:port destinations (lowercase
	// names, no wildcards, no IP literals) a phase of that stage may be
	// granted through the egress proxy. A stage absent here gets none:
	// denied egress is the default for every stage.
	Stages map[string][]string `yaml:"stages,omitempty" json:"stages,omitempty"`
	// Inspect lists destinations of Stages that the proxy must inspect
	// rather than tunnel blind: it terminates their TLS with the run's
	// CA (which the sandbox then trusts) and refuses a request whose Host
	// is not the destination, so a tunnel to one cannot front for
	// another host. Every other destination is a blind tunnel, whose
	// TLS SNI is checked but not the Host inside.
	Inspect []string `yaml:"inspect,omitempty" json:"inspect,omitempty"`
}

// Inspected reports whether the policy has the proxy inspect destination.
func (p *Policy) Inspected(destination string) bool {
	return slices.Contains(p.Egress.Inspect, destination)
}

// Credential is the operator's binding of one brokered credential.
type Credential struct {
	// File is the absolute path of the secret: a regular, root-owned
	// 0600 file, opened without following links.
	File string `yaml:"file" json:"file"`
	// Destination is the one exact host:port the secret is sent to, over
	// verified TLS.
	Destination string `yaml:"destination" json:"destination"`
	// Header is the request header that carries it, e.g. Authorization.
	Header string `yaml:"header" json:"header"`
	// Format is the header's value with {} where the secret goes, e.g.
	// "Bearer {}"; absent, the value is the secret alone.
	Format string `yaml:"format,omitempty" json:"format,omitempty"`
	// Stages are the stages that may use it; none means no stage.
	Stages []string `yaml:"stages" json:"stages"`
	// Requests are the requests the secret is sent with, each an HTTP
	// method and a path prefix ("POST /v1/messages"). Any other request
	// to the destination goes without it. Required: a binding that named
	// none would hand the secret to every endpoint of the destination,
	// echo and debug pages included.
	Requests []string `yaml:"requests" json:"requests"`
	// Form is how the workload reaches the destination: "gateway" (the
	// default: a sandbox-local plain-HTTP endpoint, no CA in the
	// sandbox) or "intercept" (for tools with a hard-coded host: the
	// proxy terminates TLS for the destination alone with a per-run CA
	// the sandbox trusts).
	Form string `yaml:"form,omitempty" json:"form,omitempty"`
}

// EffectiveForm is Form, or "gateway" when unset.
func (c Credential) EffectiveForm() string {
	if c.Form == "" {
		return egress.FormGateway
	}
	return c.Form
}

// EffectiveFormat is Format, or "{}" when unset.
func (c Credential) EffectiveFormat() string {
	if c.Format == "" {
		return "{}"
	}
	return c.Format
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
	// OutputFiles bounds the number of entries (files, directories and
	// symlinks) a run may leave in its output. Optional: absent means
	// DefaultOutputFiles. It is from 1 to MaxOutputFiles, so that a
	// receipt listing every output stays within the envelope limit.
	OutputFiles *int64 `yaml:"outputFiles,omitempty" json:"outputFiles,omitempty"`
	// Nofile bounds the open-file limit a phase may ask for. Optional:
	// absent allows only the default of 1024.
	Nofile int64 `yaml:"nofile,omitempty" json:"nofile,omitempty"`
}

// Output entry bounds: a receipt names every retained output file twice
// (as a subject and in the predicate), so their count and the length of
// their paths are bounded by design, never by the workload's good will.
const (
	// DefaultOutputFiles is ceilings.outputFiles when the policy is silent.
	DefaultOutputFiles = 4096
	// MaxOutputFiles is the largest ceilings.outputFiles a policy may set.
	MaxOutputFiles = 8192
)

// OutputFilesDefault is the output entry bound of a request that names
// no output.maxFiles and of a pool profile that names no outputFiles, by
// one rule: DefaultOutputFiles, within the ceiling. Admission and the warm
// pool both resolve it here, so a silent request matches a silent profile.
func (p *Policy) OutputFilesDefault() int64 {
	return min(int64(DefaultOutputFiles), p.Ceilings.OutputFilesCeiling())
}

// DefaultNofile is the open-file limit of a request or pool profile that
// names none, and the nofile ceiling of a policy that sets none.
const DefaultNofile = 1024

// OutputFilesCeiling is the policy's effective ceilings.outputFiles.
func (c Ceilings) OutputFilesCeiling() int64 {
	if c.OutputFiles == nil {
		return DefaultOutputFiles
	}
	return *c.OutputFiles
}

// Defaults are the open choices admission makes when a request is silent.
// Each must be within the matching ceiling.
type Defaults struct {
	CPU         float64        `yaml:"cpu" json:"cpu"`
	OutputBytes quantity.Bytes `yaml:"outputBytes" json:"outputBytes"`
	TmpBytes    quantity.Bytes `yaml:"tmpBytes" json:"tmpBytes"`
}

// Users bounds the user a workload runs as inside its sandbox (in its own
// user namespace: container root is not host root, and holds no
// capability). The zero value allows every user, root included, as before
// the field existed.
type Users struct {
	// ForbidRoot refuses a phase whose resolved user is uid 0.
	ForbidRoot bool `yaml:"forbidRoot,omitempty" json:"forbidRoot,omitempty"`
}

// ImageOverrides pins an image's run defaults: Forbid names the phase
// fields (command, env, workdir, user) a phase may not set, so that what
// runs is what the image's config says. The zero value pins nothing.
type ImageOverrides struct {
	Forbid []string `yaml:"forbid,omitempty" json:"forbid,omitempty"`
}

// OverrideFields are the phase fields ImageOverrides.Forbid may name.
var OverrideFields = []string{"command", "env", "workdir", "user"}

// Tiers enables tiers. Production is always allowed by policy (the platform
// must still prove it); development is off unless enabled here.
type Tiers struct {
	// Development enables the unqualified cgroup-v1 development tier.
	Development bool `yaml:"development" json:"development"`
}
