package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/internal/sealed"
	"github.com/custody-dev/custody/platform"
)

// Options configure a Backend.
type Options struct {
	Runtime Pinned
	// StateDir holds runc's container state (runc --root). Private, 0700.
	StateDir string
	// RuntimeDir holds per-launch bundles. It is traversable (0711) so
	// that a remapped container root can reach its launch dir; each launch
	// dir is closed to every other host user (see launchDirAccess).
	RuntimeDir string
	// UserNS maps container root to an unprivileged host range; nil runs
	// without a user namespace (the profile then says so).
	UserNS *IDMap
	// Gate is the custody-gate binary (cmd/custody-gate), the first process
	// of every container; empty means custody-gate beside Runtime.Path. It
	// is copied into a sealed memfd once, when the backend is made.
	Gate string
	// MaxLogBytes caps how much of each of stdout and stderr is passed on.
	MaxLogBytes int64
	Logger      *slog.Logger
	// Faults, if set, is called at each stage boundary; tests use it to
	// kill the runner there. Production leaves it nil.
	Faults func(stage string)
	// Egress says the caller serves restricted egress (custodyd's egress
	// proxy and broker): a Spec with Egress then gets its listeners
	// opened in the container's own network namespace, while the gate
	// holds it. False refuses every Spec with Egress.
	Egress bool
	// Profile returns the host's evidenced platform profile, probed again
	// by its owner when a fact failed: what Capabilities are read from.
	// Nil claims no capability, so admission refuses everything.
	Profile func() *platform.Profile
}

// Backend launches containers under the pinned runtime.
type Backend struct {
	opts    Options
	log     *slog.Logger
	runtime *runtimeCache
	// runcs are the runtime processes, one per verified copy (runtimeFor).
	runcMu     sync.Mutex
	runcs      map[*Binary]*runc
	gate       *os.File // sealed copy of the gate, passed to every container
	gateSHA256 string
	filter     *os.File // sealed compiled seccomp filter, installed by the gate
	filterSHA  string
	// cgroupMounts are the cgroup hierarchies, read once: where they are
	// mounted does not change under a running host's services.
	cgroupMounts []*mountinfo.Info
	// ownCgroup is this process's /proc/self/cgroup, read once with the
	// hierarchies: every launch's cgroups go under the one the daemon
	// started in, and a launch resolves them twice (Intents, Prepare).
	ownCgroup []byte
	// ownNS are this process's namespace links, which observe compares
	// every container's with.
	ownNS map[string]string
	// deviceOwners are who the device nodes belong to as a container sees
	// them (Config.DeviceOwners), read once from the host's nodes.
	deviceOwners map[string]Owner
	// userns is the user namespace the image's idmapped mounts use (see
	// idmapUserns), made at the first launch that needs it.
	usernsMu sync.Mutex
	userns   map[[3]uint32]*os.File
	// noIdmap is set once the kernel refused to idmap the image store's
	// filesystem (tmpfs before Linux 6.3, for one): the image is then the
	// overlay's plain lower layer, its owners unmapped (they show as the
	// overflow id), and Capabilities says HostImageOwners so that
	// admission refuses images whose entries are not all 0:0.
	noIdmap atomic.Bool
	// sealedOnce probes, at the first Capabilities, whether this host can
	// launch from sealed images (sealedMounts); sealedErr says why not.
	sealedOnce  sync.Once
	sealedErr   error
	sealedProbe func(ctx context.Context, dir string, idmap func(string) (int, error)) error
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,63}$`)

// New prepares the backend's directories, loads the gate and makes this
// process a child subreaper: should the runtime process die before its containers,
// the container's processes are reparented to us, not to the host's init.
func New(opts Options) (*Backend, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxLogBytes == 0 {
		opts.MaxLogBytes = 16 << 20
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("oci state dir: %w", err)
	}
	if err := os.Chmod(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("oci state dir: %w", err)
	}
	if err := os.MkdirAll(opts.RuntimeDir, 0o711); err != nil {
		return nil, fmt.Errorf("oci runtime dir: %w", err)
	}
	if err := os.Chmod(opts.RuntimeDir, 0o711); err != nil {
		return nil, fmt.Errorf("oci runtime dir: %w", err)
	}
	if opts.Gate == "" {
		opts.Gate = filepath.Join(filepath.Dir(opts.Runtime.Path), "custody-gate")
	}
	gate, gateSHA, err := sealedCopy(context.Background(), opts.Gate, "custody-gate")
	if err != nil {
		return nil, fmt.Errorf("load the custody gate: %w; fix: build it (make bin/custody-gate) and install it beside the runtime, or set runtime.gate", err)
	}
	compiled, err := CompileFilter()
	if err != nil {
		gate.Close()
		return nil, err
	}
	filter, err := sealedBytes("custody-seccomp", compiled.Program)
	if err != nil {
		gate.Close()
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	cgMounts, err := cgroupMounts()
	if err != nil {
		gate.Close()
		filter.Close()
		return nil, err
	}
	ownCgroup, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		gate.Close()
		filter.Close()
		return nil, fmt.Errorf("read own cgroup: %w", err)
	}
	devOwners, err := deviceOwnersUnder(opts.UserNS)
	if err != nil {
		gate.Close()
		filter.Close()
		return nil, err
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		gate.Close()
		filter.Close()
		return nil, fmt.Errorf("become child subreaper: %w", err)
	}
	return &Backend{opts: opts, log: opts.Logger, runtime: &runtimeCache{pinned: opts.Runtime},
		gate: gate, gateSHA256: gateSHA, filter: filter, filterSHA: compiled.SHA256, cgroupMounts: cgMounts, ownCgroup: ownCgroup,
		ownNS: ownNamespaces(), deviceOwners: devOwners, sealedProbe: sealed.ProbeOverlay}, nil
}

// sealedMounts says whether this host can launch from a sealed image the
// way mountRootfs does: an overlay over the detached erofs mount, cloned
// idmapped when the backend maps users (sealed.ProbeOverlay, with this
// backend's own idmapping). It is probed once. Without it, Capabilities
// says no SealedImages, so the runner verifies and admits against the
// rootfs directory and the backend mounts that: a kernel that mounts erofs
// from a file but cannot use it as a layer (Linux 6.12 to 6.14 may not)
// is found before any grant is spent, and never sets noIdmap.
func (b *Backend) sealedMounts() bool {
	b.sealedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var idmap func(string) (int, error)
		if b.opts.UserNS != nil {
			ns, err := b.idmapUserns(ctx)
			if err != nil {
				b.sealedErr = err
			} else {
				idmap = func(tree string) (int, error) { return idmappedImage(tree, ns) }
			}
		}
		if b.sealedErr == nil {
			b.sealedErr = b.sealedProbe(ctx, b.opts.StateDir, idmap)
		}
		if b.sealedErr != nil {
			b.log.Warn("sealed images are not mounted on this host: launches use and verify the rootfs directory", "err", b.sealedErr)
		}
	})
	return b.sealedErr == nil
}

// mountableSeal is s when this host launches from sealed images, else
// nil: the backend then mounts the rootfs directory, as its Capabilities
// told the runner (which verified that instead).
func (b *Backend) mountableSeal(s *backend.SealedImage) *backend.SealedImage {
	if s == nil || !b.sealedMounts() {
		return nil
	}
	return s
}

// Intents lists everything a launch with this id may create, as Prepare
// records it before creating any of it. A caller that records them itself
// (with other state, in one transaction) sets Launch.Journalled.
func (b *Backend) Intents(id string) ([]backend.Resource, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("container id %q is invalid", id)
	}
	cgroups, err := b.launchCgroups(id)
	if err != nil {
		return nil, err
	}
	return intents(filepath.Join(b.opts.RuntimeDir, id), id, cgroups), nil
}

func (b *Backend) launchCgroups(id string) (*cgroupDirs, error) {
	return resolveLaunchCgroups(filepath.Join("custody", id), "workload", b.cgroupMounts, b.ownCgroup)
}

func intents(dir, id string, cgroups *cgroupDirs) []backend.Resource {
	es := []backend.Resource{{Kind: KindLaunchDir, Name: dir}, {Kind: KindLaunchMount, Name: dir},
		{Kind: KindRootfsMount, Name: filepath.Join(dir, "rootfs")},
		{Kind: KindOutputMount, Name: filepath.Join(dir, "out")}, {Kind: KindContainer, Name: id}}
	for _, d := range cgroups.all() {
		es = append(es, backend.Resource{Kind: KindCgroup, Name: d})
	}
	return es
}

// GateSHA256 is the digest of the gate that every container starts with.
func (b *Backend) GateSHA256() string { return b.gateSHA256 }

// FilterSHA256 is the digest of the compiled seccomp filter the gate
// installs in every container (Filter.SHA256).
func (b *Backend) FilterSHA256() string { return b.filterSHA }

// Launch describes one container to run.
type Launch struct {
	// ID names the container; it must be unique and match [a-z0-9-]{3,64}.
	ID string
	// ImageRootfs is the read-only image tree; it is never written: the
	// container's rootfs is an overlay with a runner-owned upper layer.
	ImageRootfs string
	// ImageSealed, if not nil, is the image as a sealed erofs file, which
	// is mounted instead of ImageRootfs once its identity is checked on
	// the descriptor mounted.
	ImageSealed *backend.SealedImage
	// Config is the reviewed profile; Rootfs, Output.Source and CgroupsPath
	// are filled in by the backend.
	Config Config
	// OutputBytes is the hard bound of the output filesystem.
	OutputBytes int64
	// OutputFiles bounds the entries the output filesystem can hold
	// (its inodes, less the root); 0 leaves the filesystem's default.
	OutputFiles int64
	// Recorder journals each native resource; nil records nothing.
	Recorder backend.Recorder
	// Journalled says the caller has already recorded Intents(ID) durably,
	// so Prepare does not record them again.
	Journalled bool
	// EgressCA is the restricted egress's interception CA (PEM), bound
	// read-only at backend.EgressCAPath; nil for none.
	EgressCA []byte
}

// Container is one launch's native resources. Whatever happened, the
// caller must call Cleanup once it has taken the outputs. Where it is in
// its life is its state; the moves allowed are in state.go.
type Container struct {
	b       *Backend
	id      string
	dir     string // runtime dir of this launch
	rootfs  string
	outDir  string
	cgroups *cgroupDirs
	bin     *Binary
	// mu guards state, which only move changes (transitions in state.go).
	mu      sync.Mutex
	state   state
	mounted []string // mount points we made, innermost last
	config  []byte
	rec     backend.Recorder
	// idents are the native identities recorded per kind+name; cleanup
	// acts only where they still match.
	idents  map[string]map[string]string
	pending []backend.Resource // identities not yet journalled
	removed []backend.Resource // verified gone, journalled at the end of Cleanup
	pidfd   int                // of the gated init while it runs; 0: none
	faults  func(stage string)

	// stopSignal is sent before SIGKILL when the workload is stopped.
	stopSignal syscall.Signal
	// egress is the launch's restricted egress, nil for denied; lns are
	// the listeners its Attach opened in the container's namespace,
	// closed by Cleanup (an open one would keep the namespace alive).
	egress *backend.Egress
	lnMu   sync.Mutex
	lns    []net.Listener

	// mountIntents are the mounts on record as intents for this launch,
	// made or not: a Prepare that fails part way leaves some never made,
	// and cleanup must account for each (see unmountAll).
	mountIntents []backend.Resource
	// unmountProven says the last unmountAll undid every mount by a
	// refusing umount of its own (see there).
	unmountProven bool
}

// ID is the container id.
func (c *Container) ID() string { return c.id }

// OutputDir is the host path of the bounded output filesystem; valid until
// Cleanup.
func (c *Container) OutputDir() string { return c.outDir }

// OutputUsed is how many bytes the output filesystem holds.
func (c *Container) OutputUsed() (int64, error) { return outputfs.Used(c.outDir) }

// ConfigSHA256 is the digest of the config.json that was handed to runc.
func (c *Container) ConfigSHA256() string {
	sum := sha256.Sum256(c.config)
	return hex.EncodeToString(sum[:])
}

// Config returns the exact config.json bytes used.
func (c *Container) Config() []byte { return c.config }

// RuntimeSHA256 is the digest of the runtime bytes that ran.
func (c *Container) RuntimeSHA256() string {
	if c.bin == nil {
		return ""
	}
	return c.bin.SHA256()
}
