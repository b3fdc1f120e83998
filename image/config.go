package image

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Config is the part of an OCI image's config that says how to run it: the
// defaults `docker run IMAGE` would use. The store records it; admission
// takes a phase's command, environment, working directory and user from it
// where the phase leaves them out (StopSignal is not used yet).
type Config struct {
	// Env holds "NAME=value" entries, in the image's order.
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	// User is as the image says it: "uid", "uid:gid", "name" or
	// "name:group"; names are not resolved here.
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	StopSignal string   `json:"stopSignal,omitempty"`
}

// configOf extracts the run defaults of an image config file.
func configOf(cf *v1.ConfigFile) *Config {
	c := cf.Config
	return &Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User,
		Entrypoint: c.Entrypoint, Cmd: c.Cmd, StopSignal: c.StopSignal}
}
