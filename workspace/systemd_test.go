package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/internal/testenv"
)

// systemdImage is the reference a Debian systemd image gets on the
// isolated engine.
const systemdImage = "custody-test/systemd:latest"

// systemdPack runs systemd as PID 1, asking for nothing but the named
// authority.
const systemdPack = `name: sysd
services:
  init:
    image: custody-test/systemd:latest
    command: ["/sbin/init"]
    x-custody-systemd: true
    networks: [inner]
networks:
  inner:
    internal: true
`

// importSystemd imports the rootfs tar of a Debian systemd image into the
// isolated engine.
func importSystemd(ctx context.Context, t *testing.T, cli *client.Client, tarFile string) {
	t.Helper()
	f, err := os.Open(tarFile)
	must(t, err)
	defer f.Close()
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: f, SourceName: "-"}, systemdImage, image.ImportOptions{})
	must(t, err)
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	must(t, err)
}

// setupSystemd is setup with a policy that allows the systemd image and,
// when granted, the systemd authority.
func setupSystemd(t *testing.T, granted bool) *env {
	t.Helper()
	state := t.TempDir()
	pol := strings.Replace(policyYAML, "        - reference: custody-test/busybox:latest\n",
		"        - reference: custody-test/busybox:latest\n        - reference: "+systemdImage+"\n", 1)
	pol = strings.Replace(pol, "service: {memory: 64Mi,", "service: {memory: 256Mi,", 1)
	if granted {
		pol = strings.Replace(pol, "      bindRoots: [%s]\n", "      bindRoots: [%s]\n      systemd: true\n", 1)
	}
	must(t, os.WriteFile(filepath.Join(state, "policy.yaml"), []byte(strings.Replace(pol, "%s", filepath.Join(state, "pack"), 1)), 0o600))
	return setup(t, state, nil)
}

// TestSystemdInContainer is the measurement of the systemd-in-container
// authority (P7) on the isolated engine, with a Debian image with systemd
// built from Debian's packages, run as a pack service asking only
// x-custody-systemd. Not granted, issue refuses it, naming the
// requirement, with nothing created. Granted:
//   - on a cgroup v2 engine, up realizes exactly the expansion as the
//     engine reads it back (tmpfs /run, /run/lock and /tmp, a private cgroup
//     namespace, stop signal SIGRTMIN+3) and nothing more (not privileged,
//     no capability, device or weakened security option), and systemd boots
//     to multi-user.target; down stops it;
//   - on a cgroup v1 or hybrid engine (this host), issue refuses it as
//     unsupported, and the measurement shows why: a container with exactly
//     the expansion runs systemd, which exits because its cgroup mount is
//     read-only. (Booting it there needs the host's cgroup hierarchies bound
//     writable; the test never does that, since systemd then makes its
//     cgroups in the host's.)
func TestSystemdInContainer(t *testing.T) {
	testenv.DebianImages(t)
	tarFile := testenv.DebianTar(t, "debian-systemd", "bookworm", "systemd", "systemd-sysv")
	ctx := testCtx(t)
	refused := setupSystemd(t, false)
	importSystemd(ctx, t, refused.cli, tarFile)
	_, err := refused.m.Issue(ctx, []byte(systemdPack), refused.dir, actor, time.Hour)
	if codes := checkCodes(t, err); !slices.Equal(codes, []string{"systemd-not-granted"}) {
		t.Fatalf("issue without the systemd grant: %v", err)
	}
	if n := objectsNamed(ctx, t, refused.cli, "sysd"); n != 0 {
		t.Fatalf("a refused issue created %d objects", n)
	}

	e := setupSystemd(t, true)
	info, err := e.cli.Info(ctx)
	must(t, err)
	g, err := e.m.Issue(ctx, []byte(systemdPack), e.dir, actor, time.Hour)
	if info.CgroupVersion != "2" {
		if codes := checkCodes(t, err); !slices.Equal(codes, []string{"systemd-unsupported"}) {
			t.Fatalf("issue with the systemd grant on a cgroup v%s engine: %v", info.CgroupVersion, err)
		}
		if n := objectsNamed(ctx, t, e.cli, "sysd"); n != 0 {
			t.Fatalf("a refused issue created %d objects", n)
		}
		state, log := runExpansion(ctx, t, e.cli)
		if state.Running || !strings.Contains(log, "Read-only file system") || !strings.Contains(log, "Failed to allocate manager object") {
			t.Fatalf("systemd under the expansion on a cgroup v%s engine: running %v, exit %d; log:\n%s", info.CgroupVersion, state.Running, state.ExitCode, log)
		}
		t.Logf("cgroup v%s engine: systemd under exactly the expansion exits %d:\n%s", info.CgroupVersion, state.ExitCode, lastLines(log, 4))
		return
	}
	if err != nil {
		t.Fatalf("issue with the systemd grant: %v", err)
	}
	start := time.Now()
	rep := e.up(ctx, g, "ws-systemd")
	id := containerOf(t, rep, "init")
	in, err := e.cli.ContainerInspect(ctx, id)
	must(t, err)
	hc := in.HostConfig
	var tmpfs []string
	for _, m := range hc.Mounts {
		if m.Type == "tmpfs" {
			tmpfs = append(tmpfs, m.Target)
		}
	}
	for p := range hc.Tmpfs {
		tmpfs = append(tmpfs, p)
	}
	slices.Sort(tmpfs)
	if hc.Privileged || len(hc.CapAdd) > 0 || len(hc.Devices) > 0 || len(hc.SecurityOpt) > 0 && !onlyHardening(hc.SecurityOpt) ||
		string(hc.CgroupnsMode) != "private" || in.Config.StopSignal != admission.SystemdStopSignal ||
		!slices.Equal(tmpfs, []string{"/run", "/run/lock", "/tmp"}) || hc.PidMode != "" || hc.IpcMode.IsHost() || hc.UsernsMode.IsHost() {
		t.Fatalf("the systemd expansion as the engine holds it: privileged %v, cap_add %v, devices %v, security_opt %v, cgroupns %q, stop signal %q, tmpfs %v, pid %q",
			hc.Privileged, hc.CapAdd, hc.Devices, hc.SecurityOpt, hc.CgroupnsMode, in.Config.StopSignal, tmpfs, hc.PidMode)
	}
	t.Logf("the expansion read back: tmpfs %v, cgroupns %s, stop signal %s, cap_add %v, security_opt %v, privileged %v",
		tmpfs, hc.CgroupnsMode, in.Config.StopSignal, hc.CapAdd, hc.SecurityOpt, hc.Privileged)
	var state string
	for time.Since(start) < 90*time.Second {
		out, _ := execIn(ctx, t, e.cli, id, "systemctl", "is-system-running")
		if state = strings.TrimSpace(out); state == "running" || state == "degraded" {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	targets, _ := execIn(ctx, t, e.cli, id, "systemctl", "list-units", "--type=target", "--state=active", "--no-legend", "--plain")
	failed, _ := execIn(ctx, t, e.cli, id, "systemctl", "--failed", "--no-legend", "--plain")
	t.Logf("systemd %q after %s; failed units:\n%s", state, time.Since(start).Round(time.Millisecond), failed)
	if state != "running" && state != "degraded" || !strings.Contains(targets, "multi-user.target") {
		t.Fatalf("systemd did not boot to a target: state %q\n%s\n%s", state, targets, containerState(ctx, t, e.cli, id))
	}
	start = time.Now()
	e.down(ctx, "ws-systemd", true)
	t.Logf("down (systemd halting on %s) took %s", admission.SystemdStopSignal, time.Since(start).Round(time.Millisecond))
	if n := objects(ctx, t, e.cli, rep.ID); n != 0 {
		t.Fatalf("%d objects left after down", n)
	}
}

// runExpansion runs the systemd image on the engine with exactly what the
// systemd authority expands to (and a tty, so that systemd's messages are
// in the log), waits for it to settle, and returns its state and log.
func runExpansion(ctx context.Context, t *testing.T, cli *client.Client) (*container.State, string) {
	t.Helper()
	hc := &container.HostConfig{CgroupnsMode: "private", NetworkMode: "none"}
	for _, target := range admission.SystemdTmpfs {
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeTmpfs, Target: target, TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 64 << 20}})
	}
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: systemdImage, Cmd: []string{"/sbin/init"}, Tty: true, StopSignal: admission.SystemdStopSignal}, hc, nil, nil, "")
	must(t, err)
	defer func() {
		_ = cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})
	}()
	waitC, errC := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	must(t, cli.ContainerStart(ctx, resp.ID, container.StartOptions{}))
	select {
	case <-waitC:
	case err := <-errC:
		t.Fatal(err)
	case <-time.After(30 * time.Second): // still running: the caller judges it
	}
	in, err := cli.ContainerInspect(ctx, resp.ID)
	must(t, err)
	rc, err := cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	must(t, err)
	defer rc.Close()
	log, err := io.ReadAll(rc) // a tty's log is not multiplexed
	must(t, err)
	return in.State, string(log)
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// checkCodes are the codes of the checks a refusal lists.
func checkCodes(t *testing.T, err error) []string {
	t.Helper()
	var r *admission.RefusedError
	if !errors.As(err, &r) {
		t.Fatalf("not a refusal: %v", err)
	}
	var codes []string
	for _, c := range r.Checks {
		if c.Fix == "" {
			t.Errorf("check %s without a fix", c.Code)
		}
		codes = append(codes, c.Code)
	}
	return codes
}

// onlyHardening says whether every security option is one that hardens.
func onlyHardening(opts []string) bool {
	for _, o := range opts {
		if !strings.HasPrefix(o, "no-new-privileges") {
			return false
		}
	}
	return true
}

// containerState is a container's state and the tail of its log, for a
// failure's message.
func containerState(ctx context.Context, t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	in, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		return err.Error()
	}
	rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "40"})
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	var out strings.Builder
	_, _ = stdcopy.StdCopy(&out, &out, rc)
	return fmt.Sprintf("running %v, exit %d, oom %v, error %q; log:\n%s", in.State.Running, in.State.ExitCode, in.State.OOMKilled, in.State.Error, out.String())
}

// objectsNamed counts the engine's containers and networks whose name
// holds name.
func objectsNamed(ctx context.Context, t *testing.T, cli *client.Client, name string) int {
	t.Helper()
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", name))})
	must(t, err)
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: filters.NewArgs(filters.Arg("name", name))})
	must(t, err)
	return len(cs) + len(ns)
}
