package policy

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/quantity"
)

// PoolProfile is one warm-pool profile: custodyd keeps Size sandboxes of
// exactly this shape prepared up to their gate, and a grant whose plan
// matches it exactly (image, resources, output, user, network, tier and
// backend) takes one. Everything else launches cold.
type PoolProfile struct {
	// Name names the profile in logs and receipts.
	Name string `yaml:"name" json:"name"`
	// Image is the content digest of an image in images.
	Image string `yaml:"image" json:"image"`
	// Backend is the backend the sandboxes are made on: oci (containers
	// held at their gate) or vm (guests booted until their init waits).
	Backend string `yaml:"backend,omitempty" json:"backend,omitempty"`
	// Tier is the tier the sandboxes are held to (production or
	// development; development must be enabled in tiers).
	Tier string `yaml:"tier" json:"tier"`
	// Network is deny: a pooled sandbox never has restricted egress (its
	// proxy and CA are a run's own).
	Network string `yaml:"network,omitempty" json:"network,omitempty"`
	// Size is how many sandboxes are kept prepared, 1 to MaxPoolSize.
	Size int `yaml:"size" json:"size"`
	// IdleTTL is how long a prepared sandbox may wait for a grant before
	// it is destroyed (and a fresh one made).
	IdleTTL quantity.Duration `yaml:"idleTTL" json:"idleTTL"`
	// UID and GID are the ids the workload runs as inside the sandbox
	// (fixed when it is made); a phase that resolves to another user is
	// launched cold.
	UID uint32 `yaml:"uid,omitempty" json:"uid,omitempty"`
	GID uint32 `yaml:"gid,omitempty" json:"gid,omitempty"`
	// Resources are the budgets, each within the matching ceiling.
	Resources PoolResources `yaml:"resources" json:"resources"`
}

// PoolResources are a pool profile's budgets: a plan must ask for exactly
// these to be pooled.
type PoolResources struct {
	Memory   quantity.Bytes `yaml:"memory" json:"memory"`
	Pids     int64          `yaml:"pids" json:"pids"`
	CPU      float64        `yaml:"cpu" json:"cpu"`
	TmpBytes quantity.Bytes `yaml:"tmpBytes" json:"tmpBytes"`
	// Nofile is the open-file limit; absent is the default of 1024.
	Nofile      int64          `yaml:"nofile,omitempty" json:"nofile,omitempty"`
	OutputPath  string         `yaml:"outputPath" json:"outputPath"`
	OutputBytes quantity.Bytes `yaml:"outputBytes" json:"outputBytes"`
	// OutputFiles bounds the output's entries; absent is the default a
	// request without output.maxFiles gets (Policy.OutputFilesDefault).
	OutputFiles int64 `yaml:"outputFiles,omitempty" json:"outputFiles,omitempty"`
}

// Pool bounds.
const (
	// MaxPoolSize bounds one profile's size, and MaxPooled all profiles'
	// together: every held sandbox holds a cgroup, mounts and processes.
	MaxPoolSize = 16
	MaxPooled   = 32
	// MinPoolTTL and MaxPoolTTL bound a profile's idle TTL.
	MinPoolTTL = time.Second
	MaxPoolTTL = 24 * time.Hour
)

var poolNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// EffectiveBackend is Backend, or "oci" when unset.
func (p PoolProfile) EffectiveBackend() string {
	if p.Backend == "" {
		return string(backend.KindOCI)
	}
	return p.Backend
}

// EffectiveNofile is Resources.Nofile, or DefaultNofile when unset, as
// for a request.
func (r PoolResources) EffectiveNofile() int64 {
	if r.Nofile == 0 {
		return DefaultNofile
	}
	return r.Nofile
}

// validatePool checks the pool section: a broken profile refuses the whole
// policy, never one profile quietly.
func (p *Policy) validatePool(add adder) {
	seen := firsts{}
	total := 0
	for i, pr := range p.Pool {
		f := func(name string) string { return fmt.Sprintf("pool[%d].%s", i, name) }
		if !poolNamePattern.MatchString(pr.Name) {
			add(f("name"), fmt.Sprintf("%q is not a profile name", pr.Name), "use 1 to 32 lowercase letters, digits or '-', starting with a letter or digit")
		} else if j, dup := seen.repeat(pr.Name, i); dup {
			add(f("name"), fmt.Sprintf("%q is also pool[%d].name", pr.Name, j), "give each profile its own name")
		}
		switch {
		case !digestPattern.MatchString(pr.Image):
			add(f("image"), fmt.Sprintf("%q is not an image digest", pr.Image), "use the sha256:<64 lowercase hex> digest of an image in images")
		case !p.AllowsImage(pr.Image):
			add(f("image"), fmt.Sprintf("%s is not in images, so no grant could ever take the pool's sandboxes", pr.Image), "add the image to images, or name one listed there")
		}
		if b := pr.EffectiveBackend(); b != string(backend.KindOCI) && b != string(backend.KindVM) {
			add(f("backend"), fmt.Sprintf("backend %q cannot hold a sandbox before a grant exists (only oci and vm pool)", b), "pool on oci or vm, or leave the profile out: other backends launch cold")
		}
		switch pr.Tier {
		case "production":
		case "development":
			if !p.Tiers.Development {
				add(f("tier"), "the development tier is not enabled in tiers", "set tiers.development: true, or pool at tier production")
			}
		default:
			add(f("tier"), fmt.Sprintf("%q is not a tier", pr.Tier), "use production or development")
		}
		if pr.Network != "" && pr.Network != "deny" {
			add(f("network"), fmt.Sprintf("%q cannot be pooled: restricted egress needs the run's own proxy and CA, made with its grant", pr.Network), "set network: deny (egress phases launch cold)")
		}
		if pr.Size < 1 || pr.Size > MaxPoolSize {
			add(f("size"), fmt.Sprintf("%d is not from 1 to %d", pr.Size, MaxPoolSize), fmt.Sprintf("keep 1 to %d sandboxes per profile", MaxPoolSize))
		}
		total += max(pr.Size, 0)
		if ttl := time.Duration(pr.IdleTTL); ttl < MinPoolTTL || ttl > MaxPoolTTL {
			add(f("idleTTL"), fmt.Sprintf("%s is not from %s to %s", ttl, MinPoolTTL, MaxPoolTTL), "set an idle TTL such as 10m")
		}
		p.validatePoolResources(add, i, pr.Resources)
	}
	if total > MaxPooled {
		add("pool", fmt.Sprintf("the profiles keep %d sandboxes together, more than %d", total, MaxPooled), fmt.Sprintf("keep at most %d prepared sandboxes in all", MaxPooled))
	}
}

func (p *Policy) validatePoolResources(add adder, i int, r PoolResources) {
	f := func(name string) string { return fmt.Sprintf("pool[%d].resources.%s", i, name) }
	c := p.Ceilings
	within := func(name string, v, ceiling int64) {
		switch {
		case v <= 0:
			add(f(name), "must be greater than zero", "set it, within ceilings."+name)
		case ceiling > 0 && v > ceiling:
			add(f(name), fmt.Sprintf("%d is above ceilings.%s %d", v, name, ceiling), fmt.Sprintf("lower it or raise ceilings.%s: no grant could match it", name))
		}
	}
	within("memory", int64(r.Memory), int64(c.Memory))
	within("pids", r.Pids, c.Pids)
	within("tmpBytes", int64(r.TmpBytes), int64(c.TmpBytes))
	within("outputBytes", int64(r.OutputBytes), int64(c.OutputBytes))
	if math.IsNaN(r.CPU) || math.IsInf(r.CPU, 0) || r.CPU <= 0 || (c.CPU > 0 && r.CPU > c.CPU) {
		add(f("cpu"), fmt.Sprintf("%v is not a positive number of cores within ceilings.cpu %v", r.CPU, c.CPU), "set cores such as 0.5 or 1")
	}
	if n := r.Nofile; n != 0 && (n < 64 || n > max(c.Nofile, 1024)) {
		add(f("nofile"), fmt.Sprintf("%d is not from 64 to the nofile ceiling %d", n, max(c.Nofile, 1024)), "lower it, raise ceilings.nofile, or leave it out for 1024")
	}
	if n := r.OutputFiles; n < 0 || n > c.OutputFilesCeiling() {
		add(f("outputFiles"), fmt.Sprintf("%d is not from 1 to ceilings.outputFiles %d", n, c.OutputFilesCeiling()), "lower it or leave it out")
	}
	if o := r.OutputPath; !path.IsAbs(o) || path.Clean(o) != o || o == "/" || slices.Contains([]string{"/proc", "/sys", "/dev", "/tmp"}, o) {
		add(f("outputPath"), fmt.Sprintf("%q is not a clean absolute path of its own", o), "name where outputs appear, e.g. /out")
	}
}

// EffectiveOutputFiles is Resources.OutputFiles, or OutputFilesDefault
// when unset, as for a request.
func (p *Policy) EffectiveOutputFiles(r PoolResources) int64 {
	if r.OutputFiles == 0 {
		return p.OutputFilesDefault()
	}
	return r.OutputFiles
}
