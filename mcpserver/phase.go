package mcpserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/request"
)

// PhaseFields describe a phase request field by field, for an agent that
// would rather not write the YAML. They become a phase request exactly as
// written: nothing is added that the call did not ask for, except the
// defaults each field's description states.
type PhaseFields struct {
	Name      string            `json:"name,omitempty" jsonschema:"a label for the run in results (default: the stage); it carries no authority"`
	Stage     string            `json:"stage,omitempty" jsonschema:"the pipeline stage this phase performs: acquire, generate, build, test or run; the authorization must allow it (default: test)"`
	Tier      string            `json:"tier,omitempty" jsonschema:"production (the default) or development, an unqualified tier that runs only where the operator enabled it"`
	Image     string            `json:"image,omitempty" jsonschema:"the image's content digest (sha256:...), one of the images custody_authorizations lists"`
	Backend   string            `json:"backend,omitempty" jsonschema:"oci (runc, the default) or vm (a microVM per phase), if the runner has it"`
	Toolchain string            `json:"toolchain,omitempty" jsonschema:"a free-form label of the toolchain expected, e.g. go1.26; informational"`
	Command   []string          `json:"command,omitempty" jsonschema:"argv; the first element is an absolute path inside the image, e.g. [\"/bin/sh\", \"-c\", \"make test\"]; absent, the image's entrypoint runs"`
	Workdir   string            `json:"workdir,omitempty" jsonschema:"absolute working directory inside the sandbox"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables to set; nothing is inherited from the host"`
	User      string            `json:"user,omitempty" jsonschema:"uid, uid:gid, name or name:group inside the image"`
	Inputs    []PhaseInput      `json:"inputs,omitempty" jsonschema:"host files or directories mounted read-only (snapshotted before the run), or earlier outputs by digest"`
	// Output and limits.
	OutputPath     string   `json:"output_path,omitempty" jsonschema:"absolute path of the one writable directory whose files are kept (default: /out)"`
	OutputMaxBytes string   `json:"output_max_bytes,omitempty" jsonschema:"bound on the output directory, e.g. 32Mi (default: the operator's)"`
	OutputMaxFiles int64    `json:"output_max_files,omitempty" jsonschema:"bound on the entries the output may hold (default: the operator's)"`
	TmpMaxBytes    string   `json:"tmp_max_bytes,omitempty" jsonschema:"size of the tmpfs at /tmp, e.g. 16Mi"`
	Memory         string   `json:"memory,omitempty" jsonschema:"memory limit, e.g. 256Mi (default: 256Mi)"`
	Pids           int64    `json:"pids,omitempty" jsonschema:"process limit (default: 128)"`
	CPU            float64  `json:"cpu,omitempty" jsonschema:"CPU cores, e.g. 0.5 (default: the operator's)"`
	WallTime       string   `json:"wall_time,omitempty" jsonschema:"wall-clock limit, e.g. 2m (default: 2m)"`
	Nofile         int64    `json:"nofile,omitempty" jsonschema:"open-file limit (default: the runner's)"`
	Egress         []string `json:"egress,omitempty" jsonschema:"network destinations as host:port reached through the runner's egress proxy; empty means no network (loopback only)"`
	Credentials    []string `json:"credentials,omitempty" jsonschema:"names of brokered credentials to ask for; the secret never enters the sandbox, only a placeholder the egress proxy swaps for the bound destination"`
}

// PhaseInput is one input of a phase.
type PhaseInput struct {
	Source   string `json:"source" jsonschema:"a host path (relative paths resolve against base_dir), or output:sha256:... naming an earlier run's kept output"`
	Target   string `json:"target" jsonschema:"absolute mount point inside the sandbox"`
	Writable bool   `json:"writable,omitempty" jsonschema:"a writable copy whose writes are discarded; the snapshot itself stays immutable"`
}

// Defaults of a phase built from fields.
const (
	defaultStage    = "test"
	defaultOutput   = "/out"
	defaultMemory   = "256Mi"
	defaultPids     = 128
	defaultWallTime = "2m"
)

// phaseDoc is the phase request built from fields, in the phase request's
// own spelling (JSON is YAML's subset, so it is sent as the phase's YAML).
type phaseDoc struct {
	APIVersion  string            `json:"apiVersion"`
	Kind        string            `json:"kind"`
	Name        string            `json:"name"`
	Stage       string            `json:"stage"`
	Tier        string            `json:"tier,omitempty"`
	Image       string            `json:"image"`
	Toolchain   string            `json:"toolchain,omitempty"`
	Backend     string            `json:"backend,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Workdir     string            `json:"workdir,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	User        string            `json:"user,omitempty"`
	Inputs      []PhaseInput      `json:"inputs,omitempty"`
	Output      outputDoc         `json:"output"`
	Tmp         *tmpDoc           `json:"tmp,omitempty"`
	Resources   resourcesDoc      `json:"resources"`
	Network     *networkDoc       `json:"network,omitempty"`
	Credentials []string          `json:"credentials,omitempty"`
}

type outputDoc struct {
	Path     string `json:"path"`
	MaxBytes string `json:"maxBytes,omitempty"`
	MaxFiles int64  `json:"maxFiles,omitempty"`
}

type tmpDoc struct {
	MaxBytes string `json:"maxBytes"`
}

type resourcesDoc struct {
	Memory   string  `json:"memory"`
	Pids     int64   `json:"pids"`
	CPU      float64 `json:"cpu,omitempty"`
	WallTime string  `json:"wallTime"`
	Nofile   int64   `json:"nofile,omitempty"`
}

type networkDoc struct {
	Egress []string `json:"egress"`
}

// isZero reports whether no field was given.
func (f *PhaseFields) isZero() bool {
	b, _ := json.Marshal(f)
	return string(b) == "{}"
}

// yaml is the phase request the fields describe.
func (f *PhaseFields) yaml() ([]byte, error) {
	d := phaseDoc{
		APIVersion: request.APIVersion, Kind: "Phase",
		Name: f.Name, Stage: or(f.Stage, defaultStage), Tier: f.Tier, Image: f.Image,
		Toolchain: f.Toolchain, Backend: f.Backend, Command: f.Command, Workdir: f.Workdir,
		Env: f.Env, User: f.User, Inputs: f.Inputs, Credentials: f.Credentials,
		Output:    outputDoc{Path: or(f.OutputPath, defaultOutput), MaxBytes: f.OutputMaxBytes, MaxFiles: f.OutputMaxFiles},
		Resources: resourcesDoc{Memory: or(f.Memory, defaultMemory), Pids: f.Pids, CPU: f.CPU, WallTime: or(f.WallTime, defaultWallTime), Nofile: f.Nofile},
	}
	if d.Name == "" {
		d.Name = d.Stage
	}
	if d.Resources.Pids == 0 {
		d.Resources.Pids = defaultPids
	}
	if f.TmpMaxBytes != "" {
		d.Tmp = &tmpDoc{MaxBytes: f.TmpMaxBytes}
	}
	if len(f.Egress) > 0 {
		d.Network = &networkDoc{Egress: f.Egress}
	}
	if d.Image == "" {
		return nil, errors.New("image: no image given; fix: name one of the image digests custody_authorizations lists (sha256:...)")
	}
	return json.Marshal(d)
}

// phaseSource is the phase a run call asks for, as custodyd takes it:
// the YAML given (or built from the fields) and the directory its
// relative inputs resolve against. It is parsed here first, so a
// malformed phase is refused, naming each field, before anything is sent.
func phaseSource(yamlText string, fields *PhaseFields, baseDir string) (api.PhaseSource, error) {
	if !filepath.IsAbs(baseDir) {
		return api.PhaseSource{}, fmt.Errorf("base_dir %q is not an absolute path; fix: give an absolute directory", baseDir)
	}
	var data []byte
	switch {
	case yamlText != "" && !fields.isZero():
		return api.PhaseSource{}, errors.New("both phase_yaml and phase fields were given; fix: give the whole phase as phase_yaml, or only the fields")
	case yamlText != "":
		data = []byte(yamlText)
	default:
		b, err := fields.yaml()
		if err != nil {
			return api.PhaseSource{}, err
		}
		data = b
	}
	if _, err := request.Parse(data); err != nil {
		return api.PhaseSource{}, fmt.Errorf("the phase request is malformed, so nothing was sent: %w", err)
	}
	return api.PhaseSource{YAML: data, BaseDir: filepath.Clean(baseDir)}, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
