package workspace_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/workspace"
)

// fixturePack delivers fixture content (pack content, not a credential)
// to app, which runs as uid 999.
const fixturePack = `name: fixtures
services:
  app:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    user: "999:999"
    secrets:
      - source: flag
        target: /run/secrets/flag
    networks: [front]
networks:
  front:
    internal: true
secrets:
  flag:
    content: "FIXTURE-FLAG-42"
`

// execAs runs cmd in the container as user ("" is the container's own) and
// returns its combined output and exit code.
func execAs(ctx context.Context, t *testing.T, cli *client.Client, id, user string, cmd ...string) (string, int) {
	t.Helper()
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{User: user, Cmd: cmd, AttachStdout: true, AttachStderr: true})
	must(t, err)
	h, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	must(t, err)
	defer h.Close()
	var out bytes.Buffer
	_, err = stdcopy.StdCopy(&out, &out, h.Reader)
	must(t, err)
	in, err := cli.ContainerExecInspect(ctx, ex.ID)
	must(t, err)
	return out.String(), in.ExitCode
}

// A secrets: entry with content: is a fixture: up writes it as a file of
// the service's user, 0400 from its first byte, which the service reads
// and another uid in the same container cannot.
func TestFixtureSecretContent(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(fixturePack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rep := e.up(ctx, g, "ws-fixture")
	app := containerOf(t, rep, "app")
	if out, code := execAs(ctx, t, e.cli, app, "999:999", "cat", "/run/secrets/flag"); code != 0 || out != "FIXTURE-FLAG-42" {
		t.Errorf("the service reads %q (exit %d)", out, code)
	}
	if out, code := execAs(ctx, t, e.cli, app, "999:999", "stat", "-c", "%a %u %g", "/run/secrets/flag"); code != 0 || out != "400 999 999\n" {
		t.Errorf("fixture file mode and owner: %q (exit %d)", out, code)
	}
	if out, code := execAs(ctx, t, e.cli, app, "1000:1000", "cat", "/run/secrets/flag"); code == 0 {
		t.Errorf("another uid read the fixture: %q", out)
	}
	if d := e.down(ctx, "ws-fixture", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
	if strings.Contains(string(g), "FIXTURE-FLAG-42") || strings.Contains(string(rep.Receipt), "FIXTURE-FLAG-42") {
		t.Error("the grant or the receipt carries the fixture's content, not only its digest")
	}

	// Refused: the runner no longer holds the content (another runner's
	// grant, or an expired reservation), before anything is spent.
	g2, err := e.m.Issue(ctx, []byte(fixturePack), e.dir, actor, time.Hour)
	must(t, err)
	must(t, e.db.Update(store.PackReservations, func(b *bolt.Bucket) error { return b.Delete([]byte(grantID(t, g2))) }))
	if _, err := e.m.Up(ctx, g2, "ws-fixture-2", root); grantCode(err) != grant.CodeNotAdmitted || !strings.Contains(err.Error(), "not held") {
		t.Errorf("up without the fixture content: %v", err)
	}
	if _, err := e.db.GrantUsed(grantID(t, g2)); err == nil {
		t.Error("the grant was spent")
	}
}
