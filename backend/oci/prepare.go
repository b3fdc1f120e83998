package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/internal/sealed"
)

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
	// lowers, for an image sealed per layer, are its layers' mounts (top
	// first): the overlay's lower layers, in place of layers[0].
	var lowers []int
	if seal != nil {
		fd, err := sealedImage(ctx, seal)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		layers[0] = fd
		// The tree as the host sees it, for ownMountPoints and the idmap.
		image = fmt.Sprintf("/proc/self/fd/%d", fd)
		if seal.Layers != nil {
			if lowers, err = seal.Layers(ctx); err != nil {
				return fmt.Errorf("sealed image: %w", err)
			}
			defer func() {
				for _, l := range lowers {
					unix.Close(l)
				}
			}()
		}
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
		if !c.b.noIdmap.Load() && lowers != nil {
			for i, l := range lowers {
				fd, err := idmappedImage(fmt.Sprintf("/proc/self/fd/%d", l), ns)
				if err != nil {
					return err
				}
				unix.Close(l)
				lowers[i] = fd
			}
		} else if !c.b.noIdmap.Load() {
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
	lowerdir := fmt.Sprintf("/proc/self/fd/%d", layers[0])
	if lowers != nil {
		names := make([]string, len(lowers))
		for i, l := range lowers {
			names[i] = fmt.Sprintf("/proc/self/fd/%d", l)
		}
		lowerdir = strings.Join(names, ":")
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=/proc/self/fd/%d,workdir=/proc/self/fd/%d", lowerdir, layers[1], layers[2])
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
