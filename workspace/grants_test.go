package workspace_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/workspace"
)

// devicePack passes /dev/null in read-only at another path, and publishes
// a UDP port (from a network that is not internal: the engine publishes no
// port of a container without a route out).
const devicePack = `name: devices
services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    devices: ["/dev/null:/dev/custody-null:r"]
    ports:
      - "127.0.0.1:20124:9000/udp"
    networks: [front]
networks:
  front: {}
`

// setupDevices is setup with a policy that also grants /dev/null and
// egress.
func setupDevices(t *testing.T) *env {
	t.Helper()
	state := t.TempDir()
	pol := strings.Replace(withEgress(policyYAML), "      bindRoots: [%s]\n", "      bindRoots: [%s]\n      devices: [/dev/null]\n", 1)
	must(t, os.WriteFile(filepath.Join(state, "policy.yaml"), []byte(strings.Replace(pol, "%s", filepath.Join(state, "pack"), 1)), 0o600))
	return setup(t, state, nil)
}

// A UDP host port taken between grant and up is refused at up with nothing
// spent; freed, the same grant goes up. The granted device keeps its
// container path and permissions: it is at /dev/custody-null, and the
// engine holds "r" for it. (A write is not the evidence: the engine's
// default device rules allow /dev/null rwm whatever the mapping says.)
func TestGrantedDeviceAndUDPPort(t *testing.T) {
	ctx := testCtx(t)
	e := setupDevices(t)
	g, err := e.m.Issue(ctx, []byte(devicePack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:20124")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Up(ctx, g, "ws-dev", root)
	c.Close()
	if grantCode(err) != grant.CodeNotAdmitted || !strings.Contains(err.Error(), "20124/udp") {
		t.Errorf("up with the UDP port taken: %v", err)
	}
	if _, err := e.db.GrantUsed(grantID(t, g)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the grant was spent: %v", err)
	}

	rep := e.up(ctx, g, "ws-dev")
	web := containerOf(t, rep, "web")
	in, err := e.cli.ContainerInspect(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	want := []container.DeviceMapping{{PathOnHost: "/dev/null", PathInContainer: "/dev/custody-null", CgroupPermissions: "r"}}
	if !slices.Equal(in.HostConfig.Devices, want) {
		t.Errorf("devices %+v, want %+v", in.HostConfig.Devices, want)
	}
	if out, code := execIn(ctx, t, e.cli, web, "sh", "-c", "test -c /dev/custody-null && cat /dev/custody-null"); code != 0 {
		t.Errorf("read of the granted device: %d %s", code, out)
	}
	res := e.verify(ctx, rep.Receipt, devicePack)
	if !res.OK || len(res.Receipt.Containers) != 1 {
		t.Fatalf("receipt: %+v", res.Checks)
	}
	if d := res.Receipt.Containers[0].HostConfig.Devices; !slices.Equal(d, []string{"/dev/null:/dev/custody-null:r"}) {
		t.Errorf("receipt devices %q", d)
	}
	if pb := res.Receipt.Containers[0].HostConfig.PortBindings; len(pb) != 1 || pb[0].ContainerPort != "9000/udp" {
		t.Errorf("port bindings %+v", pb)
	}
}

// An issue whose mint fails (here its context ends after the reservation)
// leaves no subnet reservation behind; a legitimate issue leaves one.
func TestFailedMintLeavesNoReservation(t *testing.T) {
	ctx := testCtx(t)
	mintCtx, cancel := context.WithCancel(ctx)
	fault := func(stage string) {
		if stage == workspace.FaultReserved {
			cancel()
		}
	}
	e := setup(t, t.TempDir(), fault)
	reservations := func() int {
		n := 0
		must(t, e.db.View(store.PackReservations, func(b *bolt.Bucket) error { n = b.Stats().KeyN; return nil }))
		return n
	}
	if _, err := e.m.Issue(mintCtx, []byte(rangePack), e.dir, actor, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("issue with the mint cancelled: %v", err)
	}
	if n := reservations(); n != 0 {
		t.Errorf("%d reservations after a failed mint", n)
	}
	e.issue(ctx)
	if n := reservations(); n != 1 {
		t.Errorf("%d reservations after an issue", n)
	}
}
