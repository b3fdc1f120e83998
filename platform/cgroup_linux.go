package platform

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/randid"
)

// probeCgroups proves which controllers a runtime could use, by creating and
// removing a child cgroup under this process's own cgroup in every
// hierarchy. It only ever creates, inspects and removes its own uniquely
// named children: cgroups it did not create (this process's own, its
// siblings and parents) belong to whoever supervises the host and are only
// read.
func probeCgroups(mounts []mountInfo, cgroupRoot string, ownCgroup []byte) Cgroup {
	l := classifyCgroups(mounts, cgroupRoot)
	cg := Cgroup{Mode: l.Mode, V2Delegated: []string{}, V1Usable: []string{}}
	own, ownErr := readProcCgroup(procSelfCgroup)
	if ownCgroup != nil {
		own, ownErr = parseProcCgroup(bytes.NewReader(ownCgroup))
	}

	// cgroup v1: every hierarchy that binds controllers.
	v1Err := make(map[string]error)
	for _, h := range l.V1 {
		if len(h.Controllers) == 0 {
			continue
		}
		res, err := probeV1Hierarchy(h, own, ownErr)
		for _, c := range h.Controllers {
			switch {
			case err != nil:
				v1Err[c] = err
			case res[c] != nil:
				v1Err[c] = res[c]
			default:
				cg.V1Usable = append(cg.V1Usable, c)
			}
		}
	}
	slices.Sort(cg.V1Usable)

	// cgroup v2: what the unified hierarchy delegates to a child of ours.
	var v2 v2Probe
	v2Err := errors.New("no cgroup2 hierarchy is mounted")
	if l.Unified != nil {
		cg.Unified = l.Unified.MountPoint
		v2Err = ownErr
		if v2Err == nil {
			v2, v2Err = probeV2(*l.Unified, own)
		}
		if v2Err == nil {
			cg.V2Delegated = v2.Delegated
		}
	}

	for _, c := range ProductionControllers() {
		if slices.Contains(cg.V2Delegated, c) {
			continue
		}
		if cg.V2Missing == nil {
			cg.V2Missing = make(map[string]string)
		}
		cg.V2Missing[c] = v2MissingReason(c, l, v2, v2Err)
	}

	for _, c := range DevelopmentControllers() {
		if slices.Contains(cg.V1Usable, c) {
			continue
		}
		if cg.V1Missing == nil {
			cg.V1Missing = make(map[string]string)
		}
		switch {
		case v1Err[c] != nil:
			cg.V1Missing[c] = v1Err[c].Error()
		case l.Unified != nil && slices.Contains(v2.RootControllers, c):
			cg.V1Missing[c] = "bound to cgroup v2 at " + l.Unified.MountPoint
		default:
			cg.V1Missing[c] = "not mounted as a cgroup v1 hierarchy"
		}
	}
	return cg
}

// probeV1Hierarchy creates a child of this process's cgroup in v1
// hierarchy h and checks, per controller, that the child has the
// controller's interface files. It returns a per-controller error and an
// error for the probe as a whole (no child could be made or removed).
func probeV1Hierarchy(h hierarchy, own []procCgroup, ownErr error) (map[string]error, error) {
	if ownErr != nil {
		return nil, ownErr
	}
	p, err := v1Path(own, h)
	if err != nil {
		return nil, err
	}
	parent, err := cgroupDir(h.Mount, p)
	if err != nil {
		return nil, err
	}
	res := make(map[string]error)
	err = withProbeCgroup(parent, func(dir string) error {
		for _, c := range h.Controllers {
			res[c] = checkV1Controller(dir, c)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 %s: %w", hierarchyLabel(h), err)
	}
	return res, nil
}

// checkV1Controller checks that the fresh cgroup dir exposes a readable
// interface file of controller c, which the kernel creates only when c is
// attached to the hierarchy.
func checkV1Controller(dir, c string) error {
	name := v1MarkerFile(c)
	if name == "" {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("list probe cgroup: %w", err)
		}
		name = "cgroup.procs" // perf_event has no files of its own
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), c+".") && e.Type().IsRegular() {
				name = e.Name()
				break
			}
		}
	}
	if _, err := os.ReadFile(filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("probe cgroup lacks a readable %s: %w", name, err)
	}
	return nil
}

// probeV2 creates a child of this process's cgroup in the unified
// hierarchy and reads the child's cgroup.controllers, which is exactly the
// parent's cgroup.subtree_control: the controllers a runtime creating
// cgroups here could set limits with. Nothing is written to the parent.
func probeV2(m mountInfo, own []procCgroup) (v2Probe, error) {
	var r v2Probe
	p, err := unifiedPath(own)
	if err != nil {
		return r, err
	}
	if r.Parent, err = cgroupDir(m, p); err != nil {
		return r, err
	}
	if r.RootControllers, err = readControllers(filepath.Join(m.MountPoint, "cgroup.controllers")); err != nil {
		return r, fmt.Errorf("cgroup v2: %w", err)
	}
	if r.ParentControllers, err = readControllers(filepath.Join(r.Parent, "cgroup.controllers")); err != nil {
		return r, fmt.Errorf("cgroup v2: %w", err)
	}
	err = withProbeCgroup(r.Parent, func(dir string) error {
		var err error
		r.Delegated, err = readControllers(filepath.Join(dir, "cgroup.controllers"))
		return err
	})
	if err != nil {
		return r, fmt.Errorf("cgroup v2: %w", err)
	}
	return r, nil
}

// withProbeCgroup creates a uniquely named child cgroup of parent, calls
// fn with it, and removes it again, verifying the removal. Mkdir fails if
// the name exists, so the probe never adopts a cgroup it did not create.
func withProbeCgroup(parent string, fn func(dir string) error) (err error) {
	dir := filepath.Join(parent, probeName())
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create probe cgroup: %w", err)
	}
	defer func() {
		if rerr := removeCgroup(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if err := fn(dir); err != nil {
		return fmt.Errorf("probe cgroup %s: %w", dir, err)
	}
	return nil
}

// removeCgroup removes the empty cgroup dir and checks that it is gone.
// The kernel can briefly refuse with EBUSY while it takes a just-used
// cgroup offline, so that is retried for a short while.
func removeCgroup(dir string) error {
	var err error
	for range 20 {
		err = unix.Rmdir(dir)
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove probe cgroup %s: %w", dir, err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("probe cgroup %s still present after rmdir (%v)", dir, err)
	}
	return nil
}

// probeName returns a fresh name for something the probe creates.
func probeName() string {
	return probePrefix + randid.New(6)
}

// ErrControllerNotDelegated is returned (wrapped) for a controller that a
// cgroup v2 directory's cgroup.controllers does not offer: its parent did
// not delegate it, so it cannot be enabled there.
var ErrControllerNotDelegated = errors.New("controller not delegated")

// EnableControllers enables each controller of want in the cgroup v2
// directory dir's cgroup.subtree_control, so that cgroups created below dir
// (the runs') get its interface files. It returns, per controller it could
// not enable, why: ErrControllerNotDelegated when dir's cgroup.controllers
// lacks it, or the write's error (EBUSY while dir itself holds a process).
// Controllers already enabled are left as they are.
func EnableControllers(dir string, want []string) map[string]error {
	failed := map[string]error{}
	have, err := readControllers(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		for _, c := range want {
			failed[c] = fmt.Errorf("cgroup v2: %w", err)
		}
		return failed
	}
	enabled, err := readControllers(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		for _, c := range want {
			failed[c] = fmt.Errorf("cgroup v2: %w", err)
		}
		return failed
	}
	sub := filepath.Join(dir, "cgroup.subtree_control")
	for _, c := range want {
		switch {
		case slices.Contains(enabled, c):
		case !slices.Contains(have, c):
			failed[c] = fmt.Errorf("%s: %w: absent from %s", c, ErrControllerNotDelegated, filepath.Join(dir, "cgroup.controllers"))
		default:
			// One write per controller: a multi-controller write is all or
			// nothing, and the reason is per controller.
			if err := os.WriteFile(sub, []byte("+"+c), 0); err != nil {
				failed[c] = fmt.Errorf("enable %s in %s: %w", c, sub, err)
			}
		}
	}
	return failed
}
