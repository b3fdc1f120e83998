package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/egress"
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

// Prepare verifies the runtime and creates the launch's native resources:
// bundle dir, overlay rootfs, bounded output filesystem and config.json. On
// error the returned Container (if non-nil) still needs Cleanup.
func (b *Backend) prepare(ctx context.Context, l Launch) (*Container, error) {
	if !idPattern.MatchString(l.ID) {
		return nil, fmt.Errorf("container id %q is invalid", l.ID)
	}
	if l.OutputBytes <= 0 {
		return nil, fmt.Errorf("an output bound is required (got %d bytes)", l.OutputBytes)
	}
	// A tmpfs rounds its size up to a page: a smaller tmp budget could not
	// be held.
	if page := int64(os.Getpagesize()); l.Config.TmpBytes < page {
		return nil, fmt.Errorf("tmp budget of %d bytes cannot be enforced: a tmpfs holds at least one page (%d bytes); fix: ask for tmp.maxBytes of at least %d",
			l.Config.TmpBytes, page, page)
	}
	if m := b.opts.UserNS; m != nil && (l.Config.UID >= m.Size || l.Config.GID >= m.Size) {
		return nil, fmt.Errorf("user %d:%d is outside the user namespace's %d ids; fix: run as a uid and gid below %d",
			l.Config.UID, l.Config.GID, m.Size, m.Size)
	}
	// Verify the runtime first: a wrong binary refuses before any mutation.
	bin, err := b.runtime.get(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.opts.RuntimeDir, l.ID)
	rec := l.Recorder
	if rec == nil {
		rec = partial.Nop{}
	}
	cgroups, err := b.launchCgroups(l.ID)
	if err != nil {
		bin.Close()
		return nil, err
	}
	// Everything this launch may create, in one durable record before any
	// of it exists.
	if !l.Journalled {
		if err := rec.Intent(intents(dir, l.ID, cgroups)...); err != nil {
			bin.Close()
			return nil, fmt.Errorf("journal launch: %w", err)
		}
	}
	mode, gid := b.launchDirAccess()
	if err := os.Mkdir(dir, 0o700); err != nil {
		bin.Close()
		return nil, fmt.Errorf("launch dir: %w", err)
	}
	c := &Container{
		b: b, id: l.ID, dir: dir, bin: bin, rec: rec, faults: b.opts.Faults,
		rootfs:  filepath.Join(dir, "rootfs"),
		outDir:  filepath.Join(dir, "out"),
		idents:  map[string]map[string]string{},
		cgroups: cgroups,
	}
	c.stopSignal = l.Config.StopSignal
	c.intendMounts(intents(dir, l.ID, cgroups)...)
	// Identities are recorded together once the launch's files exist: Run
	// writes them with runc's while runc starts. A failure on the way
	// records what was made here.
	prepared := false
	defer func() {
		if !prepared && len(c.pending) > 0 {
			_ = c.flushCreated()
		}
	}()
	if err := os.Chown(dir, 0, int(gid)); err != nil {
		return c, fmt.Errorf("launch dir: %w", err)
	}
	if err := os.Chmod(dir, mode); err != nil { // whatever the umask
		return c, fmt.Errorf("launch dir: %w", err)
	}
	if err := c.identify(KindLaunchDir, dir, pathIdentity); err != nil {
		return c, err
	}
	if err := c.mountLaunchDir(mode, gid); err != nil {
		return c, err
	}
	cfg := l.Config
	cfg.Rootfs = c.rootfs
	cfg.Output.Source = c.outDir
	// runc makes and deletes the leaf; custody's parent above it outlives
	// the leaf with the launch's accounting, read after runc is done.
	cfg.CgroupsPath = filepath.Join("custody", l.ID, "workload")
	cfg.Gated = true
	cfg.UserNS = b.opts.UserNS
	cfg.DeviceOwners = b.deviceOwners
	cfg.NoSwap = c.cgroups.swapAccounted()
	cfg.CgroupV1 = !c.cgroups.unified
	if cfg.Files, err = c.writeEtc(cfg.Hostname, l.EgressCA); err != nil {
		return c, err
	}
	if err := c.mountWritable(ctx, &cfg); err != nil {
		return c, err
	}
	c.fault("mid-prepare")
	if err := c.mountRootfs(ctx, l.ImageRootfs, l.ImageSealed, cfg); err != nil {
		return c, err
	}
	if err := c.mountOutput(l.OutputBytes, l.OutputFiles, cfg.UID, cfg.GID); err != nil {
		return c, err
	}
	spec, err := Spec(cfg)
	if err != nil {
		return c, err
	}
	// Compact: runc reads it, and indenting cost a fifth of building it.
	c.config, err = json.Marshal(spec)
	if err != nil {
		return c, fmt.Errorf("encode config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), c.config, 0o600); err != nil {
		return c, fmt.Errorf("write config: %w", err)
	}
	if _, err := c.move(opPrepared); err != nil {
		return c, err
	}
	prepared = true
	return c, nil
}

// launchDirAccess is the mode and group of a launch dir: root's alone
// (0700) without a user namespace, where container root is host root; with
// one, traversable (0710) by the group container root maps to as well, so
// runc's setup inside the namespace reaches the rootfs and the mount
// sources. No other host user can stat or write the merged rootfs, the
// overlay's upper layer or the output: the image's owners are real ids
// (1000 is somebody's on the host) and its world-writable directories
// stay world-writable.
func (b *Backend) launchDirAccess() (fs.FileMode, uint32) {
	if m := b.opts.UserNS; m != nil {
		return 0o710, m.HostID
	}
	return 0o700, 0
}

// mountLaunchDir mounts a small tmpfs over the launch dir, with the launch
// dir's mode and group: the overlay's upper and work dirs and config.json
// live in memory, so the end of a launch needs no sync of a disk
// filesystem (unmounting an overlay syncs its upper layer) and no removal
// of files from one.
func (c *Container) mountLaunchDir(mode fs.FileMode, gid uint32) error {
	c.mounted = append(c.mounted, c.dir)
	opts := fmt.Sprintf("size=32m,nr_inodes=4096,mode=%04o,uid=0,gid=%d", uint32(mode.Perm()), gid)
	if err := unix.Mount("tmpfs", c.dir, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("launch dir tmpfs: %w", err)
	}
	return c.identify(KindLaunchMount, c.dir, mountIdentity)
}

// writeEtc writes the files a program expects in /etc into the launch
// dir, to be bound read-only over the image's: /etc/hosts naming localhost
// and the sandbox's hostname on loopback, /etc/hostname matching the UTS
// name, and an empty /etc/resolv.conf, since egress is denied and there is
// no resolver to name; and the egress interception CA, when there is one,
// at backend.EgressCAPath. The image tree is never modified.
func (c *Container) writeEtc(hostname string, egressCA []byte) ([]Mount, error) {
	files := []struct{ target, data string }{
		{"/etc/hosts", fmt.Sprintf("127.0.0.1\tlocalhost %[1]s\n::1\tlocalhost ip6-localhost ip6-loopback %[1]s\n", hostname)},
		{"/etc/hostname", hostname + "\n"},
		{"/etc/resolv.conf", ""},
	}
	if len(egressCA) > 0 {
		files = append(files, struct{ target, data string }{backend.EgressCAPath, string(egressCA)})
	}
	var ms []Mount
	for _, f := range files {
		p := filepath.Join(c.dir, "etc-"+path.Base(f.target))
		if err := os.WriteFile(p, []byte(f.data), 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.target, err)
		}
		if err := os.Chmod(p, 0o644); err != nil { // whatever the umask
			return nil, fmt.Errorf("write %s: %w", f.target, err)
		}
		ms = append(ms, Mount{Source: p, Target: f.target})
	}
	return ms, nil
}

// mountRootfs makes an overlay whose upper layer already holds every mount
// point, so runc never needs to create anything in the image. The image
// is the sealed erofs file when there is one (see sealedImage), else the
// tree.
func (c *Container) mountRootfs(ctx context.Context, image string, seal *backend.SealedImage, cfg Config) error {
	upper := filepath.Join(c.dir, "upper")
	work := filepath.Join(c.dir, "work")
	for _, d := range []string{upper, work, c.rootfs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("rootfs dirs: %w", err)
		}
	}
	for _, m := range baseMounts(cfg) {
		p := filepath.Join(upper, filepath.FromSlash(m.Destination))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", m.Destination, err)
		}
		src := m.Source
		if m.Type == "bind" && src == c.outDir {
			src = "" // the output is always a directory
		}
		if fi, err := os.Stat(src); m.Type == "bind" && err == nil && !fi.IsDir() {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o444)
			if err != nil {
				return fmt.Errorf("mount point %s: %w", m.Destination, err)
			}
			f.Close()
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", m.Destination, err)
		}
	}
	// The layers are named by descriptor: overlayfs shows its options
	// as given in every mountinfo, the workload's included, and the
	// paths would name the image store and the launch dir.
	var layers [3]int
	if seal != nil {
		fd, err := sealedImage(ctx, seal)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		layers[0] = fd
		// The tree as the host sees it, for ownMountPoints and the idmap.
		image = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	for i, d := range []string{image, upper, work} {
		if i == 0 && seal != nil {
			continue
		}
		fd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("rootfs layer %s: %w", d, err)
		}
		defer unix.Close(fd)
		layers[i] = fd
	}
	if m := c.b.opts.UserNS; m != nil {
		if err := ownMountPoints(upper, image, *m); err != nil {
			return fmt.Errorf("mount points: %w", err)
		}
		ns, err := c.b.idmapUserns(ctx)
		if err != nil {
			return err
		}
		if !c.b.noIdmap.Load() {
			fd, err := idmappedImage(image, ns)
			switch {
			case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
				c.b.noIdmap.Store(true)
				c.b.log.Warn("the kernel cannot idmap the image store's filesystem: images are mounted unmapped, and images with non-root owners are refused", "err", err)
			case err != nil:
				return err
			default:
				defer unix.Close(fd)
				layers[0] = fd
			}
		}
	}
	opts := fmt.Sprintf("lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d", layers[0], layers[1], layers[2])
	c.mounted = append(c.mounted, c.rootfs)
	if err := unix.Mount("overlay", c.rootfs, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mount overlay rootfs: %w", err)
	}
	return c.identify(KindRootfsMount, c.rootfs, mountIdentity)
}

// sealedImage is the sealed image as a detached, read-only erofs mount:
// the one the runner made when it verified the file (seal.Mount), else
// one mounted here from the descriptor whose identity it checked against
// the one the runner verified, so a file replaced since is refused, not
// mounted.
func sealedImage(ctx context.Context, seal *backend.SealedImage) (int, error) {
	if seal.Mount != nil {
		fd, err := seal.Mount(ctx)
		if err != nil {
			return -1, fmt.Errorf("sealed image: %w", err)
		}
		return fd, nil
	}
	want, err := sealed.Parse(seal.Identity)
	if err != nil {
		return -1, fmt.Errorf("sealed image: %w", err)
	}
	f, err := sealed.Open(seal.File, want)
	if err != nil {
		return -1, fmt.Errorf("sealed image: %w", err)
	}
	defer f.Close() // the mount keeps the file
	fd, err := sealed.Mount(f, nil)
	if err != nil {
		return -1, fmt.Errorf("sealed image: %w", err)
	}
	// The file may have been replaced in place between the open check and
	// the mount: only an identity that held across the mount vouches for it.
	if err := sealed.Check(f, want); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sealed image: %w", err)
	}
	return fd, nil
}

// mountOutput mounts a tmpfs with a hard size bound and an inode bound:
// writes past either fail with ENOSPC in the workload, so no workload can
// leave more entries than its receipt may list. If the bounds cannot be
// mounted, the launch is refused rather than run unbounded.
func (c *Container) mountOutput(limit, files int64, uid, gid uint32) error {
	if err := os.Mkdir(c.outDir, 0o700); err != nil {
		return fmt.Errorf("output dir: %w", err)
	}
	// The output belongs to the workload's user, whoever that is.
	var owner *outputfs.Owner
	if m := c.b.opts.UserNS; m != nil {
		owner = &outputfs.Owner{UID: int(m.HostID + uid), GID: int(m.HostID + gid)}
	} else if uid != 0 || gid != 0 {
		owner = &outputfs.Owner{UID: int(uid), GID: int(gid)}
	}
	c.mounted = append(c.mounted, c.outDir)
	if err := outputfs.Mount(c.outDir, limit, files, owner); err != nil {
		return err
	}
	return c.identify(KindOutputMount, c.outDir, mountIdentity)
}

// Run runs the container with one run of the runtime and waits until its whole
// process tree is gone: the workload exits, the wall time passes, or ctx is
// cancelled (then the tree is killed). The container's first process is the
// gate: once runc has set up every namespace, mount, capability drop and
// seccomp filter, the gate reports ready and waits; the backend observes the
// process from outside, and only then lets it exec the workload. It returns
// an error only when the container could not be run or could not be
// stopped. A container runs once: a second Run, or one after Cleanup, is
// refused with a *StateError before anything is made.
func (c *Container) run(ctx context.Context, wall time.Duration, stdout, stderr io.Writer) (*backend.Exit, error) {
	if _, err := c.move(opRun); err != nil {
		return nil, err
	}
	defer func() { _, _ = c.move(opExit) }() // refused only if a Cleanup came first
	s, err := c.startDrains(stdout, stderr)
	if err != nil {
		return nil, &StartError{Stage: StageStreams, Err: err}
	}
	g, err := c.startGated(ctx, s, wall)
	if err != nil {
		return nil, &StartError{Stage: StageRuntime, Err: err}
	}
	defer g.control.Close()
	defer g.join()
	defer g.timer.Stop()
	if err := g.awaitReady(ctx); err != nil {
		return nil, &StartError{Stage: StageSetup, Err: err}
	}
	pid, observed, err := g.joinIdentities()
	if err != nil {
		return nil, &StartError{Stage: StageObserve, Err: g.abort(err)}
	}
	c.fault("after-create")
	if pidfd, err := unix.PidfdOpen(pid, 0); err == nil {
		c.pidfd = pidfd
		defer func() { unix.Close(c.pidfd); c.pidfd = 0 }()
	}
	ex := &backend.Exit{Started: time.Now(), Observation: observed}
	if err := c.attachEgress(ctx); err != nil {
		return nil, &StartError{Stage: StageEgress, Err: g.abort(err)}
	}
	if err := g.goAhead(); err != nil {
		return nil, &StartError{Stage: StageGoAhead, Err: g.abort(err)}
	}
	runErr, err := g.wait(ctx, pid, ex)
	if err != nil {
		return nil, err
	}
	ex.Finished = time.Now()
	c.fault("after-exit")
	s.wait()
	if err := c.exitStatus(ex, runErr); err != nil {
		return nil, err
	}
	c.collectUsage(ex)
	return ex, nil
}

// The stages of a run before its workload starts, as a StartError names
// them.
const (
	StagePrepare = "prepare"         // the launch dir, mounts and config, before runc
	StageStreams = "streams"         // the stdout and stderr pipes
	StageRuntime = "runtime-start"   // starting runc
	StageSetup   = "container-setup" // runc's namespaces, mounts, cwd, up to the gate
	StageObserve = "observe"         // custody's observation of the gated container
	StageGoAhead = "go-ahead"        // releasing the gate
	StageEgress  = "egress-attach"   // opening the egress listeners in the container's namespace
)

// attachEgress lets the launch's Egress open its listeners inside the
// held container's network namespace, entered through the gate's pidfd
// (never a pid, which could be recycled). The namespace is the one runc
// made fresh for this container, loopback only: the listeners are the
// only things in it that lead anywhere.
func (c *Container) attachEgress(ctx context.Context) error {
	if c.egress == nil {
		return nil
	}
	if c.pidfd == 0 {
		return errors.New("no pidfd for the gated container, so its namespace cannot be entered safely; fix: run on Linux 5.3 or later")
	}
	return c.egress.Attach(ctx, func(addr string) (net.Listener, error) {
		ln, err := egress.ListenInPidfd(c.pidfd, addr)
		if err != nil {
			return nil, err
		}
		c.lnMu.Lock()
		defer c.lnMu.Unlock()
		c.lns = append(c.lns, ln)
		return ln, nil
	})
}

// closeEgress closes every egress listener; nil when there were none.
func (c *Container) closeEgress() error {
	c.lnMu.Lock()
	defer c.lnMu.Unlock()
	var errs []error
	for _, ln := range c.lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	c.lns = nil
	return errors.Join(errs...)
}

// StartError is a run that failed before its workload started: nothing of
// the workload ran, whatever exit status the runtime had.
type StartError struct {
	Stage string
	Err   error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("failed to start (stage %s): %v", e.Stage, e.Err)
}
func (e *StartError) Unwrap() error { return e.Err }

// StartStage names the stage that failed; callers match on the method, so
// they need not import this package.
func (e *StartError) StartStage() string { return e.Stage }

// streams are a run's stdout and stderr pipes, drained into the caller's
// writers.
type streams struct {
	outW, errW *os.File
	copied     chan struct{}
}

// startDrains makes the two pipes and starts draining them, each up to
// MaxLogBytes.
func (c *Container) startDrains(stdout, stderr io.Writer) (*streams, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	s := &streams{outW: outW, errW: errW, copied: make(chan struct{}, 2)}
	limit := c.b.opts.MaxLogBytes
	var mu sync.Mutex
	go drain(outR, stdout, &mu, limit, s.copied)
	go drain(errR, stderr, &mu, limit, s.copied)
	return s, nil
}

// closeWriters closes this process's write ends, once runc holds its own.
func (s *streams) closeWriters() {
	s.outW.Close()
	s.errW.Close()
}

// wait lets the drains finish, for a few seconds at most: a process that
// escaped with a copy of a pipe must not hold the run.
func (s *streams) wait() {
	for range 2 {
		select {
		case <-s.copied:
		case <-time.After(5 * time.Second):
			return
		}
	}
}

// gated is one run of the container by the runtime, and the gate it holds.
type gated struct {
	c       *Container
	streams *streams
	control *os.File     // this end of the gate's control socket
	exited  <-chan error // the run's result: nil, an *ExitError or why it failed
	flushed chan error   // the journal record of its identity
	joined  bool
	wall    time.Duration
	timer   *time.Timer // the wall time, counted from runc's start
}

// startGated starts the runtime's run with the gate as the container's first
// process, and journals runc's identity while runc creates the container.
// The wall time runs from here.
func (c *Container) startGated(ctx context.Context, s *streams, wall time.Duration) (*gated, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		s.closeWriters()
		s.wait()
		return nil, fmt.Errorf("gate control socket: %w", err)
	}
	control := os.NewFile(uintptr(pair[0]), "gate-control")
	theirs := os.NewFile(uintptr(pair[1]), "gate-control-peer")
	rc, err := c.b.runtimeFor(c.bin)
	var exited <-chan error
	if err == nil {
		exited, err = rc.startRun(c.id, c.dir, s.outW, s.errW, theirs, c.b.gate, c.b.filter)
	}
	theirs.Close()
	s.closeWriters()
	if err != nil {
		s.wait()
		control.Close()
		return nil, err
	}
	g := &gated{c: c, streams: s, control: control, exited: exited, flushed: make(chan error, 1), wall: wall}
	// The runtime's identity is journalled with Prepare's identities while
	// it starts the container (tens of milliseconds): recovery waits until
	// exactly that process no longer runs the container, and finds the
	// container through runc's own state. The record must have landed
	// before the go-ahead; every return joins it, so that no record lands
	// after cleanup's.
	go func() { g.flushed <- c.recordRuntime(rc.ident) }()
	g.timer = time.NewTimer(wall)
	return g, nil
}

// join waits for the journal record of runc's identity, once.
func (g *gated) join() error {
	if g.joined {
		return nil
	}
	g.joined = true
	return <-g.flushed
}

// abort ends a run that fails before the go-ahead: closing the control
// socket makes the gate exit without running the workload.
func (g *gated) abort(err error) error {
	g.join()
	g.control.Close()
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		g.c.kill(0)
		<-g.exited
	}
	g.streams.wait()
	return err
}

// awaitReady waits for the gate to report that runc has set the container
// up, within the wall time and until ctx ends.
func (g *gated) awaitReady(ctx context.Context) error {
	c := g.c
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		n, err := g.control.Read(b[:])
		if err == nil && (n != 1 || b[0] != 'r') {
			err = fmt.Errorf("unexpected gate message %q", b[:n])
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			runErr := <-g.exited
			g.streams.wait()
			return fmt.Errorf("runc run: the container never reached its workload (%v): %v", err, runErr)
		}
		return nil
	case runErr := <-g.exited:
		g.streams.wait()
		return fmt.Errorf("runc run: %v", runErr)
	case <-g.timer.C:
		return g.abort(fmt.Errorf("container %s: not ready within its wall time of %s", c.id, g.wall))
	case <-ctx.Done():
		return g.abort(fmt.Errorf("container %s: cancelled before its workload started: %w", c.id, ctx.Err()))
	}
}

// joinIdentities finds the gated init, arms the OOM watch, observes the
// container from outside, and waits for runc's identity to be on record.
// The watches and the observation make nothing durable and need no record,
// so they overlap the journal's write (which a loaded disk makes slow);
// the go-ahead still waits for both.
func (g *gated) joinIdentities() (int, *backend.Observation, error) {
	c := g.c
	pid, err := c.gatedPid()
	if err != nil {
		return 0, nil, err
	}
	watchErr := errors.Join(c.cgroups.watchOOM(), c.cgroups.watchPids(pid))
	observed := c.observe(pid)
	if err := g.join(); err != nil {
		return 0, nil, err
	}
	if watchErr != nil {
		return 0, nil, watchErr
	}
	return pid, observed, nil
}

// goAhead releases the gate: it execs the workload.
func (g *gated) goAhead() error {
	if _, err := g.control.Write([]byte{'g'}); err != nil {
		return fmt.Errorf("release the gate: %w", err)
	}
	g.control.Close()
	g.c.fault("after-start")
	g.c.fault("mid-run")
	return nil
}

// StopGrace is how long a workload stopped by its StopSignal has to end
// before SIGKILL.
const StopGrace = 2 * time.Second

// wait waits for the runtime's run to end: with the workload, or killed with its
// tree when the wall time passes or ctx ends (after the image's StopSignal
// and StopGrace, when it names one). It returns runc's result,
// and an error only when the container could not be stopped.
func (g *gated) wait(ctx context.Context, pid int, ex *backend.Exit) (runErr, err error) {
	select {
	case runErr = <-g.exited:
	case <-g.timer.C:
		ex.TimedOut = true
	case <-ctx.Done():
		ex.Cancelled = true
	}
	if ex.TimedOut || ex.Cancelled {
		if g.c.stopSignal != 0 && g.c.pidfd > 0 && unix.PidfdSendSignal(g.c.pidfd, g.c.stopSignal, nil, 0) == nil {
			// The image's StopSignal first: a workload that handles it
			// may end cleanly within the grace period.
			select {
			case runErr = <-g.exited:
				ex.Signal, ex.Code = unix.SignalName(g.c.stopSignal), 128+int(g.c.stopSignal)
				return runErr, nil
			case <-time.After(StopGrace):
			}
		}
		g.c.kill(pid)
		select {
		case runErr = <-g.exited:
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("container %s: runc run did not end after its init %d was killed", g.c.id, pid)
		}
		ex.Signal, ex.Code = "SIGKILL", 128+int(unix.SIGKILL)
	}
	return runErr, nil
}

// exitStatus reads the workload's status from the run's result: the
// runtime reports the workload's, 128+n for signal n (an *ExitError when
// not 0). A killed run already has its status.
func (c *Container) exitStatus(ex *backend.Exit, runErr error) error {
	if ex.TimedOut || ex.Cancelled {
		return nil
	}
	var ee *ExitError
	switch {
	case runErr == nil:
	case errors.As(runErr, &ee):
		ex.Code = ee.Code
	default:
		return fmt.Errorf("runc run: %w", runErr)
	}
	return nil
}

// collectUsage reads what the kernel accounted to the launch.
func (c *Container) collectUsage(ex *backend.Exit) {
	ex.Usage = c.cgroups.usage()
	ooms, late := c.cgroups.oomNotified()
	ex.Usage.OOMKills = max(ex.Usage.OOMKills, ooms, lateOOMs(late, ex.Code, ex.Usage.PeakMemoryBytes, ex.Observation.Cgroup.MemoryLimitBytes))
	ex.Usage.PidsLimitHits = c.cgroups.pidsNotified()
	// The leaf is gone with its limits; they were read from it live.
	observed := ex.Observation
	ex.Usage.MemoryLimitBytes, ex.Usage.PidsLimit = observed.Cgroup.MemoryLimitBytes, observed.Cgroup.PidsLimit
	ex.OOMKilled = ex.Usage.OOMKills > 0
	if ex.OOMKilled && ex.Code == 128+int(unix.SIGKILL) {
		ex.Signal = "SIGKILL"
	}
}

// lateOOMs reads the leaf's OOM firings that were read only after the
// leaf was gone (cgroupDirs.oomLate), of which one may be its removal's:
// two or more hold an OOM for sure; one is an OOM only with the kernel's
// other marks of one, a SIGKILLed workload whose memory reached its limit
// (within a sixteenth: the kernel charges in batches, and a huge page
// that does not fit fails whole).
func lateOOMs(late int64, code int, peak, limit int64) int64 {
	switch {
	case late >= 2:
		return late - 1
	case late == 1 && code == 128+int(unix.SIGKILL) && limit > 0 && peak+limit/16 >= limit:
		return 1
	}
	return 0
}

// gatedPid finds the gate: the one process in the launch's leaf cgroup
// (any hierarchy holds every member; the pids one is read).
func (c *Container) gatedPid() (int, error) {
	pids, err := c.cgroups.leafProcs("pids")
	if err != nil {
		return 0, err
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("container %s: expected only the gate in its cgroup, found %v", c.id, pids)
	}
	return pids[0], nil
}

// kill sends SIGKILL to init; when init dies the kernel kills every process
// in its pid namespace, double-forked and setsid'd ones included. The pidfd
// taken while the gate held init cannot hit a reused pid; without one it
// goes through the runtime, and if that fails every pid in the cgroup is
// killed.
func (c *Container) kill(pid int) {
	if c.pidfd > 0 && unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.b.runtimeFor(c.bin)
	if err == nil {
		err = rc.kill(ctx, c.id, unix.SIGKILL)
	}
	if err != nil {
		c.b.log.Warn("runc kill failed; killing cgroup members", "id", c.id, "err", err)
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if pids, err := c.cgroups.procs(); err == nil {
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
	}
}

// drain passes a container stream on, at most limit bytes. Writes of the
// two streams are serialised: callers often hand the same writer for both.
func drain(r *os.File, w io.Writer, mu *sync.Mutex, limit int64, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	defer r.Close()
	if w == nil {
		w = io.Discard
	}
	buf := make([]byte, 32<<10)
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			keep := int64(m)
			if n+keep > limit {
				keep = max(limit-n, 0)
			}
			if keep > 0 {
				mu.Lock()
				_, _ = w.Write(buf[:keep])
				mu.Unlock()
			}
			if n < limit && n+int64(m) > limit {
				mu.Lock()
				fmt.Fprintf(w, "\n[custody: output truncated at %d bytes]\n", limit)
				mu.Unlock()
			}
			n += int64(m)
		}
		if err != nil {
			return
		}
	}
}

// Cleanup removes everything this launch created and verifies each part is
// gone: no process in the cgroup, no runtime state, no cgroup directories,
// no mounts, no launch directory. It is idempotent.
func (c *Container) cleanup(ctx context.Context) *backend.CleanupReport {
	ctx = context.WithoutCancel(ctx)
	if c.rec == nil {
		c.rec = partial.Nop{}
	}
	from, _ := c.move(opCleanup) // allowed from every state
	recovery := from == stateRecovering
	r := &backend.CleanupReport{}
	if c.egress != nil {
		partial.Step(r, "egress-listeners-closed", c.closeEgress())
	}
	if c.bin != nil && c.runtimeMayHold(from) {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rc, err := c.b.runtimeFor(c.bin)
		if err != nil {
			partial.Step(r, "runtime", err)
		}
		if err == nil && recovery {
			err = c.stopRecovered(dctx)
			partial.Step(r, "runtime-kill", err)
			if err == nil {
				err = c.waitRuntime(dctx, rc)
				partial.Step(r, "runtime-exited", err)
			}
		}
		// The runtime deletes its container when the workload ends; a
		// runtime call is needed only when its state is still there (the
		// run failed, or the runtime process ended with the runner).
		_, serr := os.Lstat(filepath.Join(c.b.opts.StateDir, c.id))
		if err == nil && !errors.Is(serr, fs.ErrNotExist) {
			// A plain delete suffices once init is reaped; force is kept
			// for a container that is somehow still alive.
			err = rc.delete(dctx, c.id, false)
			if err != nil && !errors.Is(err, ErrNotExist) {
				err = rc.delete(dctx, c.id, true)
			}
			if errors.Is(err, ErrNotExist) {
				err = nil
			}
			partial.Step(r, "runtime-delete", err)
		}
		cancel()
	}
	c.fault("mid-cleanup")
	// The cgroups and the mounts are separate things to undo and verify:
	// their removals overlap, and the report keeps its order.
	var cgErr, cgEmpty error
	var cgroups sync.WaitGroup
	if c.cgroups != nil {
		cgroups.Go(func() {
			c.cgroups.oomNotified() // closes the eventfd if a failed run left it
			c.cgroups.pidsNotified()
			// The kernel refuses to remove a cgroup that holds a process
			// (EBUSY), so every directory gone proves them empty.
			if cgErr = c.removeCgroups(); cgErr != nil {
				cgEmpty = c.verifyNoProcs()
			}
		})
	}
	stateDir := filepath.Join(c.b.opts.StateDir, c.id)
	stateErr := absent(stateDir)
	unmountErr := c.unmountAll(recovery)
	cgroups.Wait()
	if c.cgroups != nil {
		partial.Step(r, "cgroup-empty", cgEmpty)
		partial.Step(r, "cgroup-removed", cgErr)
		if cgErr == nil {
			for _, d := range c.cgroups.all() {
				c.removed = append(c.removed, backend.Resource{Kind: KindCgroup, Name: d})
			}
		}
	}
	partial.Step(r, "runtime-state-gone", stateErr)
	if stateErr == nil { // started or not, the runtime holds no such container
		c.removed = append(c.removed, backend.Resource{Kind: KindContainer, Name: c.id})
	}
	partial.Step(r, "unmounted", unmountErr)
	partial.Step(r, "launch-dir-removed", c.removeDir(unmountErr == nil, c.ownsDir(from)))
	if len(c.removed) > 0 {
		if err := c.rec.Removed(c.removed...); err != nil {
			partial.Step(r, "journalled", err) // the removals are verified but not on record
		}
		c.removed = nil
	}
	if c.bin != nil {
		c.bin.Close()
		c.bin = nil
	}
	r.Verified = true
	for _, s := range r.Steps {
		if !s.OK {
			r.Verified = false
		}
	}
	return r
}

func (c *Container) verifyNoProcs() error {
	pids, err := c.cgroups.procs()
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		return fmt.Errorf("processes %v remain in the container's cgroup", pids)
	}
	return nil
}

// removeCgroups removes the container's cgroup directories if runc left
// any; only the exact directories it resolved for this id are touched.
// Each directory is gone once its rmdir succeeds or finds nothing, so no
// second look is needed; runc has already removed the leaves.
func (c *Container) removeCgroups() error {
	var errs []error
	for _, d := range c.cgroups.all() {
		if want := c.idents[KindCgroup+"\x00"+d]; want != nil {
			if err := sameIdentity(d, want); errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// unmount unmounts p, retrying EBUSY for a moment. A process the daemon
// is forking for another launch holds a copy of the daemon's file table,
// and with it any file of this launch the daemon had open (its output,
// just hashed), until its exec closes them: a concurrent launch made an
// output's unmount fail that way once in about a thousand under make
// bench. That passes in well under the 250 ms allowed; a mount still busy
// then is really held (a file open on the output, say) and the cleanup is
// not verified. After a runner died, its runtime process may still be
// tearing the container down (reaping its init, whose mount namespace
// holds the launch's mounts) when recovery begins, and before the runtime's
// identity was journalled there is nothing to wait on: so in recovery the
// launch dir's own tmpfs gets 2 s. With a mount still inside, EBUSY is not
// retried: the inner one is what holds it.
func (c *Container) unmount(p string, innerLeft, recovery bool) error {
	wait := 250 * time.Millisecond
	if recovery && p == c.dir {
		wait = 2 * time.Second
	}
	deadline := time.Now().Add(wait)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := unix.Unmount(p, 0)
		if !errors.Is(err, unix.EBUSY) || innerLeft || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
	}
}

// unmountAll unmounts what this launch mounted, innermost first; nil means
// no mount is left under the launch dir.
func (c *Container) unmountAll(recovery bool) error {
	var errs []error
	var left []string
	// proven stays true while every mount this launch made, the launch
	// dir's tmpfs (mounted first, over an empty directory) last, is undone
	// by a umount of our own that succeeded: the kernel refuses a umount
	// without MNT_DETACH (EBUSY) while another mount sits beneath. Then no
	// mount can be left under the launch dir but on the directory itself,
	// which removeDir's rmdir refuses too, so the mount table need not be
	// read (it is, whenever anything else happened).
	proven := !recovery && len(c.mounted) > 0 && c.mounted[0] == c.dir
	for i := len(c.mounted) - 1; i >= 0; i-- {
		p := c.mounted[i]
		kind := KindOutputMount
		switch {
		case p == c.rootfs:
			kind = KindRootfsMount
		case p == c.dir:
			kind = KindLaunchMount
		case p == c.scratchDir():
			kind = KindScratchMount
		case filepath.Dir(p) == c.scratchDir():
			kind = KindInputMount
		}
		want := c.idents[kind+"\x00"+p]
		got, err := mountIdentity(p)
		switch {
		case err != nil:
			// Nothing mounted there (any more): gone.
			proven = false
		case want != nil && got["mountId"] != want["mountId"]:
			errs = append(errs, fmt.Errorf("mount at %s is id %s, the journal recorded %s: %w; not unmounting it",
				p, got["mountId"], want["mountId"], errNotOwned))
			left = append(left, p)
			continue
		default:
			if err := c.unmount(p, len(left) > 0, recovery); err != nil {
				proven = false
				if !errors.Is(err, unix.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
					left = append(left, p)
					continue
				}
			}
		}
		if _, err := mountIdentity(p); err == nil {
			errs = append(errs, fmt.Errorf("still mounted: %s", p))
			left = append(left, p)
			continue
		}
		c.removed = append(c.removed, backend.Resource{Kind: kind, Name: p})
	}
	c.unmountProven = false
	if len(errs) == 0 && proven && !slices.ContainsFunc(c.mountIntents, func(m backend.Resource) bool {
		return !slices.ContainsFunc(c.removed, func(r backend.Resource) bool { return r.Kind == m.Kind && r.Name == m.Name })
	}) {
		c.unmountProven = true
	} else if len(errs) == 0 {
		ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(c.dir))
		if err != nil {
			return fmt.Errorf("read mountinfo: %w", err)
		}
		for _, m := range ms {
			errs = append(errs, fmt.Errorf("still mounted: %s", m.Mountpoint))
		}
		if len(ms) == 0 {
			// The mount table holds nothing at or under the launch dir, so
			// every mount this launch intended is verified absent, the ones
			// a failed Prepare never made included.
			for _, m := range c.mountIntents {
				if !slices.ContainsFunc(c.removed, func(r backend.Resource) bool { return r.Kind == m.Kind && r.Name == m.Name }) {
					c.removed = append(c.removed, backend.Resource{Kind: m.Kind, Name: m.Name})
				}
			}
		}
	}
	c.mounted = left
	return errors.Join(errs...)
}

// removeDir removes the launch dir; owned says its removal is journalled.
func (c *Container) removeDir(nothingMounted, owned bool) error {
	// Never remove a directory that still has a mount under it: RemoveAll
	// would descend into the mounted filesystem. unmountAll, just before,
	// has read the mount table for this when it found nothing left.
	if !nothingMounted {
		if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(c.dir)); err != nil || len(left) > 0 {
			return fmt.Errorf("launch dir %s still has mounts; not removed", c.dir)
		}
	}
	if want := c.idents[KindLaunchDir+"\x00"+c.dir]; want != nil {
		if err := sameIdentity(c.dir, want); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// After a proven unmount the launch dir is the empty directory its
	// tmpfs covered: rmdir removes exactly that, and refuses (ENOTEMPTY,
	// EBUSY) a directory holding anything, a mount point included; then
	// the mount table decides, as after any other unmount.
	removed := false
	if nothingMounted && c.unmountProven {
		err := unix.Rmdir(c.dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			removed = true
		case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY):
			if left, err := mountinfo.GetMounts(mountinfo.PrefixFilter(c.dir)); err != nil || len(left) > 0 {
				return fmt.Errorf("launch dir %s still has mounts; not removed", c.dir)
			}
		default:
			return fmt.Errorf("remove launch dir: %w", err)
		}
	}
	if !removed {
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("remove launch dir: %w", err)
		}
	}
	if err := absent(c.dir); err != nil {
		return err
	}
	if owned {
		c.removed = append(c.removed, backend.Resource{Kind: KindLaunchDir, Name: c.dir})
	}
	return nil
}

func absent(p string) error {
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("%s still exists", p)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check %s: %w", p, err)
	}
	return nil
}

func (c *Container) fault(stage string) {
	if c.faults != nil {
		c.faults(stage)
	}
}

// identify reads a resource's native identity once it was made, for the
// next flushCreated.
func (c *Container) identify(kind, name string, ident func(string) (map[string]string, error)) error {
	id, err := ident(name)
	if err != nil {
		return fmt.Errorf("identify %s %s: %w", kind, name, err)
	}
	c.idents[kind+"\x00"+name] = id
	c.pending = append(c.pending, backend.Resource{Kind: kind, Name: name, Identity: id})
	return nil
}

// intendMounts notes the mounts among es, intents on record, for cleanup
// to account for.
func (c *Container) intendMounts(es ...backend.Resource) {
	for _, e := range es {
		switch e.Kind {
		case KindLaunchMount, KindRootfsMount, KindOutputMount, KindScratchMount, KindInputMount:
			c.mountIntents = append(c.mountIntents, e)
		}
	}
}

// flushCreated records the identities gathered since the last flush in one
// durable record.
func (c *Container) flushCreated() error {
	es := c.pending
	c.pending = nil
	if err := c.rec.Created(es...); err != nil {
		return fmt.Errorf("journal identities: %w", err)
	}
	return nil
}

// recordRuntime journals the container with the identity of the runtime
// process that runs it (rt, from processIdentity), together with the
// identities Prepare gathered. Should the runner die, that process kills
// its containers and exits; recovery waits for exactly this process and
// reaches the container through runc's state, which holds its init's pid
// and start time (runc checks the start time before it signals).
func (c *Container) recordRuntime(rt map[string]string) error {
	id := map[string]string{"bundle": c.dir, "runtimePid": rt["pid"], "runtimeStartTime": rt["startTime"]}
	c.idents[KindContainer+"\x00"+c.id] = id
	c.pending = append(c.pending, backend.Resource{Kind: KindContainer, Name: c.id, Identity: id})
	return c.flushCreated()
}
