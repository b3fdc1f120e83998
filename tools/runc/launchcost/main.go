// Command launchcost measures what a `runc run` process costs each launch:
// it runs one bundle n times as an exec'd `runc run` and n times in this
// process through libcontainer, runc's own library at the version this
// module pins, alternating, and prints the CPU time (its own and its
// reaped descendants', rusage) and the wall time per launch of each as
// JSON. custody-bench runs it on the raw runc bundle; custody itself
// launches through bin/custody-runc, never through this.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	_ "github.com/opencontainers/cgroups/devices" // device rules for the v1 and v2 managers
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
)

func init() {
	// libcontainer starts each container's init as this binary's "init".
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}

// Result is one way of launching: the mean CPU and the median wall time
// of its launches.
type Result struct {
	N         int     `json:"n"`
	CPUms     float64 `json:"cpuMs"`
	WallP50ms float64 `json:"wallP50Ms"`
}

func main() {
	runc := flag.String("runc", "runc", "the runc binary of the exec'd launches")
	bundle := flag.String("bundle", "", "the OCI bundle to launch")
	root := flag.String("root", "", "state directory (runc --root and libcontainer's), created if missing")
	n := flag.Int("n", 40, "launches of each kind")
	flag.Parse()
	if *bundle == "" || *root == "" || *n < 1 {
		fmt.Fprintln(os.Stderr, "launchcost: -bundle, -root and -n ≥ 1 are required")
		os.Exit(2)
	}
	out, err := measure(*runc, *bundle, *root, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "launchcost:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

func measure(runc, bundle, root string, n int) (map[string]Result, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	kinds := map[string]func(id string) error{
		"exec": func(id string) error {
			cmd := exec.Command(runc, "--root", root, "run", "--bundle", bundle, id)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("runc run %s: %v: %s", id, err, out)
			}
			return nil
		},
		"inproc": func(id string) error { return inProcess(data, bundle, root, id) },
	}
	cpu := map[string]time.Duration{}
	walls := map[string][]time.Duration{}
	for i := range n {
		for _, k := range []string{"exec", "inproc"} {
			id := fmt.Sprintf("launchcost-%d-%s-%d", os.Getpid(), k, i)
			c0, t0 := usage(), time.Now()
			if err := kinds[k](id); err != nil {
				return nil, err
			}
			walls[k] = append(walls[k], time.Since(t0))
			cpu[k] += usage() - c0
		}
	}
	res := map[string]Result{}
	for k, ws := range walls {
		slices.Sort(ws)
		res[k] = Result{N: n, CPUms: ms(cpu[k]) / float64(n), WallP50ms: ms(ws[len(ws)/2])}
	}
	return res, nil
}

// inProcess is `runc run` without the runc process: create the container
// from the bundle's spec, run its process, wait for it and destroy it.
func inProcess(data []byte, bundle, root, id string) error {
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return err
	}
	if spec.Root == nil || spec.Process == nil {
		return errors.New("the bundle's spec has no root or no process")
	}
	if !filepath.IsAbs(spec.Root.Path) {
		spec.Root.Path = filepath.Join(bundle, spec.Root.Path)
	}
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: id, Spec: &spec})
	if err != nil {
		return err
	}
	c, err := libcontainer.Create(root, id, cfg)
	if err != nil {
		return err
	}
	p := &libcontainer.Process{Args: spec.Process.Args, Env: spec.Process.Env, Cwd: spec.Process.Cwd,
		UID: int(spec.Process.User.UID), GID: int(spec.Process.User.GID), Init: true}
	if err := c.Run(p); err != nil {
		_ = c.Destroy()
		return fmt.Errorf("run %s: %w", id, err)
	}
	st, err := p.Wait()
	if err != nil {
		return fmt.Errorf("wait %s: %w", id, err)
	}
	if !st.Success() {
		return fmt.Errorf("%s: %s", id, st)
	}
	return c.Destroy()
}

// usage is this process's CPU time and its reaped descendants'.
func usage() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
