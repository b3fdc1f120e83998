// Package request defines the phase request: what an untrusted phase asks to
// run. A request asks; it never grants. Parsing is strict (unknown fields are
// errors) and checked against an embedded JSON Schema.
package request

import (
	"strings"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/quantity"
)

// APIVersion is the only accepted apiVersion of a phase request.
const APIVersion = "custody.dev/v1alpha1"

// Tier names the assurance level a request asks for.
type Tier string

const (
	// TierProduction needs a verified cgroup-v2 hierarchy with memory, pids,
	// cpu and io delegated. It never falls back to anything weaker.
	TierProduction Tier = "production"
	// TierDevelopment is the unqualified tier enforced through cgroup v1; it
	// runs only when operator policy enables it.
	TierDevelopment Tier = "development"
)

// DevelopmentLabel is how results, receipts and qualification rows name
// the development tier, so that it is never read as a qualified one.
const DevelopmentLabel = "development (unqualified)"

// Network is the kind of network a phase asks for.
type Network string

const (
	// NetworkDeny gives the phase a fresh network namespace with loopback
	// only. It is the default for every stage.
	NetworkDeny Network = "deny"
	// NetworkEgress gives the phase a loopback-only namespace whose only
	// way out is the run's egress proxy, to the listed destinations.
	NetworkEgress Network = "egress"
)

// NetworkRequest is the phase's network: in YAML either the string deny
// or a mapping {egress: ["host:port", ...]} of exact host names with
// their ports (no wildcards, no IP literals). The zero value is deny.
type NetworkRequest struct {
	// Mode is the string form as written ("deny"), empty for the mapping.
	Mode Network `yaml:"-" json:"-"`
	// Egress lists the destinations asked for, each at most once.
	Egress []string `yaml:"egress,omitempty" json:"egress,omitempty"`
}

// Stage names the part of a pipeline a phase performs. Operator policy
// grants stages to actors; a request only says which stage it is.
type Stage string

const (
	// StageAcquire fetches sources or dependencies.
	StageAcquire Stage = "acquire"
	// StageGenerate produces source from source (code generators).
	StageGenerate Stage = "generate"
	// StageBuild compiles or assembles artifacts.
	StageBuild Stage = "build"
	// StageTest runs tests.
	StageTest Stage = "test"
	// StageRun runs a program for its own sake.
	StageRun Stage = "run"
)

// Valid reports whether s is one of the stages defined above.
func (s Stage) Valid() bool {
	switch s {
	case StageAcquire, StageGenerate, StageBuild, StageTest, StageRun:
		return true
	}
	return false
}

// BackendName is the backend the phase runs on, "oci" when it names none.
func (p *Phase) BackendName() string {
	if p.Backend == "" {
		return string(backend.KindOCI)
	}
	return p.Backend
}

// Phase is one phase request (kind: Phase).
type Phase struct {
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	Kind       string `yaml:"kind" json:"kind"`
	// Name labels the phase in results; it carries no authority.
	Name string `yaml:"name" json:"name"`
	// Stage is the pipeline stage the phase performs; it is required, and
	// policy decides which actors may run it.
	Stage Stage `yaml:"stage" json:"stage"`
	// Tier is the assurance level asked for; empty means production.
	Tier Tier `yaml:"tier,omitempty" json:"tier,omitempty"`
	// Image is the content digest of an imported image ("sha256:<64 hex>").
	Image string `yaml:"image" json:"image"`
	// Toolchain is a free-form label of the toolchain the phase expects,
	// e.g. "go1.26". It is informational and carries no authority.
	Toolchain string `yaml:"toolchain,omitempty" json:"toolchain,omitempty"`
	// Backend names the backend the phase runs on: "oci" (runc, the
	// default when absent) or "vm" (a microVM per phase). The runner must
	// have it configured; the grant binds it with the backend's identity.
	Backend string `yaml:"backend,omitempty" json:"backend,omitempty"`
	// Command is argv; Command[0] is an absolute path inside the image.
	// Absent, the image's Entrypoint followed by its Cmd is run, as
	// `docker run IMAGE` would; a phase command replaces both.
	Command []string `yaml:"command,omitempty" json:"command,omitempty"`
	// Workdir is the absolute working directory inside the container;
	// absent, the image's WorkingDir, else "/".
	Workdir string `yaml:"workdir,omitempty" json:"workdir,omitempty"`
	// Env is added to the image's environment (PATH included, or
	// DefaultPath when the image has none); a variable set here overrides
	// the image's. Nothing is inherited from the host.
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// User is "uid", "uid:gid", "name" or "name:group", names resolved
	// from the image's /etc/passwd and /etc/group at admission; absent,
	// the image's User, else root (0:0).
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	// Inputs are host paths snapshotted and mounted read-only.
	Inputs []Input `yaml:"inputs,omitempty" json:"inputs,omitempty"`
	// Output is the single writable directory whose files are kept.
	Output Output `yaml:"output" json:"output"`
	// Tmp bounds the tmpfs mounted at /tmp.
	Tmp *Tmp `yaml:"tmp,omitempty" json:"tmp,omitempty"`
	// Resources are the exact budgets the phase asks for.
	Resources Resources `yaml:"resources" json:"resources"`
	// Network is the network asked for; absent means deny.
	Network NetworkRequest `yaml:"network,omitempty" json:"network,omitzero"`
	// Credentials names the credentials the phase asks for. A name is
	// metadata only: it never carries a secret, and policy decides whether
	// the credential is granted.
	Credentials []string `yaml:"credentials,omitempty" json:"credentials,omitempty"`
	// Verifier marks the phase as a pipeline's verifier stage, the only
	// kind that may take inputs under the policy's verifierRoots (private
	// acceptance material). The grant binds it like every other field.
	Verifier bool `yaml:"verifier,omitempty" json:"verifier,omitempty"`
}

// DefaultPath is the PATH a workload gets when its image's config names
// none (a rootfs import has no config): the one docker and Debian use, so
// that make finds cc.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Input maps a host path (file or directory), or an earlier run's
// retained output, to a mount point.
type Input struct {
	// Source is a host path; a relative path is resolved against the
	// directory of the request file. "output:sha256:<hex>" names instead
	// an output the runner retained from an earlier run, by its tree
	// digest: the runner resolves it from its own output store, never from
	// a host path the caller names.
	Source string `yaml:"source" json:"source"`
	// Target is an absolute path inside the container.
	Target string `yaml:"target" json:"target"`
	// Writable asks for a writable copy: an overlay over the read-only
	// snapshot, whose writes are bounded and discarded; the snapshot
	// itself stays immutable.
	Writable bool `yaml:"writable,omitempty" json:"writable,omitempty"`
}

// OutputSourcePrefix starts an input source that names a retained output
// by digest ("output:sha256:<hex>").
const OutputSourcePrefix = "output:"

// OutputSource is the input source naming the retained output with tree
// digest d ("sha256:<hex>").
func OutputSource(d string) string { return OutputSourcePrefix + d }

// OutputDigest reports whether the input names a retained output, and its
// digest ("sha256:<hex>") when it does. A source with the prefix but no
// valid digest is reported as one (ok true) so that no caller ever reads
// it as a host path; Validate refuses it.
func (in Input) OutputDigest() (digest string, ok bool) {
	return strings.CutPrefix(in.Source, OutputSourcePrefix)
}

// Output is the writable output directory.
type Output struct {
	// Path is an absolute path inside the container.
	Path string `yaml:"path" json:"path"`
	// MaxBytes is the hard size bound; zero means "operator default" (an
	// open choice made at admission).
	MaxBytes quantity.Bytes `yaml:"maxBytes,omitempty" json:"maxBytes,omitempty"`
	// MaxFiles bounds the entries (files, directories and symlinks) the
	// run may leave; zero means "operator default" (an open choice).
	MaxFiles int64 `yaml:"maxFiles,omitempty" json:"maxFiles,omitempty"`
}

// Tmp bounds /tmp.
type Tmp struct {
	MaxBytes quantity.Bytes `yaml:"maxBytes" json:"maxBytes"`
}

// Resources are budgets. Memory, Pids and WallTime are required exact
// requirements; CPU is optional (zero means the operator default).
type Resources struct {
	Memory   quantity.Bytes    `yaml:"memory" json:"memory"`
	Pids     int64             `yaml:"pids" json:"pids"`
	CPU      float64           `yaml:"cpu,omitempty" json:"cpu,omitempty"` // cores, e.g. 0.5
	WallTime quantity.Duration `yaml:"wallTime" json:"wallTime"`
	// Nofile is the open-file limit (RLIMIT_NOFILE); absent means the
	// runner's default, DefaultNofile in admission.
	Nofile int64 `yaml:"nofile,omitempty" json:"nofile,omitempty"`
}
