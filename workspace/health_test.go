package workspace_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// healthPack is the shape of the public web + api + db + cache samples:
// db and api have health checks, migrate is a one-shot job, api waits
// for db healthy and migrate completed, web for api healthy, and cache
// is only started first. db turns healthy two seconds after it starts,
// so an api started early would be seen.
const healthPack = `name: health
services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    depends_on:
      api: {condition: service_healthy}
      cache: {condition: service_started}
    networks: [front]
  api:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo api-ok & wait"]
    healthcheck:
      test: ["CMD-SHELL", "echo | nc 127.0.0.1 8080 | grep -q api-ok"]
      interval: 500ms
      timeout: 2s
      retries: 3
    depends_on:
      db: {condition: service_healthy}
      migrate: {condition: service_completed_successfully}
    networks: [front, back]
  db:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 2; touch /root/ready; while :; do sleep 1; done"]
    healthcheck:
      test: ["CMD", "test", "-f", "/root/ready"]
      interval: 500ms
      timeout: 2s
      retries: 10
    networks: [back]
  migrate:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "sleep 1; exit 0"]
    networks: [back]
  cache:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 6379 -e echo cache-ok & wait"]
    networks: [back]
networks:
  front:
    internal: true
  back:
    internal: true
`

// TestHealthAndConditions: up starts services in dependency order and
// waits for each condition: api starts only after db's check said healthy
// and migrate exited 0, web after api is healthy. The workspace reports
// each service's real state (healthy, exited with code 0), in-world
// traffic flows, the receipt verifies and down leaves nothing.
func TestHealthAndConditions(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(healthPack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-health")
	states := map[string]string{}
	for _, r := range rep.Resources {
		if strings.HasSuffix(r.Kind, "container") {
			states[r.Name[strings.LastIndex(r.Name, "-")+1:]] = r.State + " " + r.Detail
		}
	}
	for svc, want := range map[string]string{"api": "running healthy", "db": "running healthy", "migrate": "exited exit code 0", "web": "running ", "cache": "running "} {
		if states[svc] != want {
			t.Errorf("%s is reported %q, want %q (all: %v)", svc, states[svc], want, states)
		}
	}
	inspect := func(svc string) (started, finished time.Time, healthyAt time.Time) {
		in, err := e.cli.ContainerInspect(ctx, containerOf(t, rep, svc))
		if err != nil {
			t.Fatal(err)
		}
		started, _ = time.Parse(time.RFC3339Nano, in.State.StartedAt)
		finished, _ = time.Parse(time.RFC3339Nano, in.State.FinishedAt)
		if h := in.State.Health; h != nil {
			for _, l := range h.Log {
				if l.ExitCode == 0 {
					healthyAt = l.End
					break
				}
			}
		}
		return started, finished, healthyAt
	}
	_, _, dbHealthy := inspect("db")
	_, migrateDone, _ := inspect("migrate")
	apiStarted, _, apiHealthy := inspect("api")
	webStarted, _, _ := inspect("web")
	if dbHealthy.IsZero() || apiStarted.Before(dbHealthy) {
		t.Errorf("api started at %v, before db's first passing check at %v", apiStarted, dbHealthy)
	}
	if apiStarted.Before(migrateDone) {
		t.Errorf("api started at %v, before migrate finished at %v", apiStarted, migrateDone)
	}
	if apiHealthy.IsZero() || webStarted.Before(apiHealthy) {
		t.Errorf("web started at %v, before api's first passing check at %v", webStarted, apiHealthy)
	}
	if out, code := execIn(ctx, t, e.cli, containerOf(t, rep, "web"), "sh", "-c", "echo | nc api 8080"); code != 0 || !strings.Contains(out, "api-ok") {
		t.Errorf("web -> api: %q (exit %d)", out, code)
	}
	if res := e.verify(ctx, rep.Receipt, healthPack); !res.OK || !res.Acceptable || len(res.Receipt.Containers) != 5 {
		t.Errorf("up receipt: %+v", res.Checks)
	}
	d := e.down(ctx, "ws-health", true)
	if d.State != workspace.StateClean || objects(ctx, t, e.cli, rep.ID) != 0 {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
}

// TestHealthRefusals: a health check that never passes fails the up,
// which is torn down with an up-failed receipt saying why; a dependency
// that exits 1 fails a service_completed_successfully dependent, which
// never starts; service_healthy on a service without a check, a check
// without a test and one whose verdict could take longer than up waits
// are refused at admission.
func TestHealthRefusals(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	never := webClientPack("never", `    healthcheck:
      test: ["CMD", "false"]
      interval: 300ms
      retries: 2
`)
	g, err := e.m.Issue(ctx, []byte(never), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep, err := e.m.Up(ctx, g, "ws-never", root)
	if !errors.Is(err, workspace.ErrUnhealthy) || rep == nil {
		t.Fatalf("up of a never-healthy service: %v, want ErrUnhealthy", err)
	}
	res := e.verify(ctx, rep.Receipt, never)
	if res.Acceptable || res.Receipt == nil || res.Receipt.Operation != "up-failed" || !strings.Contains(res.Receipt.Failure, "service web a service is not healthy") {
		t.Errorf("the failed up's receipt: acceptable %v %+v", res.Acceptable, res.Receipt)
	}
	if rep.State != workspace.StateClean || objects(ctx, t, e.cli, rep.ID) != 0 {
		t.Errorf("after the failed up: %s %s, %d objects", rep.State, rep.Detail, objects(ctx, t, e.cli, rep.ID))
	}

	failing := `name: failjob
services:
  job:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "exit 3"]
    networks: [front]
  app:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    depends_on:
      job: {condition: service_completed_successfully}
    networks: [front]
networks:
  front:
    internal: true
`
	g, err = e.m.Issue(ctx, []byte(failing), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep, err = e.m.Up(ctx, g, "ws-failjob", root)
	if !errors.Is(err, workspace.ErrNotCompleted) || !strings.Contains(err.Error(), "exit code 3") {
		t.Fatalf("up with a failing job: %v, want ErrNotCompleted naming exit code 3", err)
	}
	if rep.State != workspace.StateClean {
		t.Errorf("after the failed up: %s %s", rep.State, rep.Detail)
	}

	for name, tc := range map[string]struct{ doc, req, code string }{
		"no check": {webClientPack("nocheck", "    depends_on:\n      client: {condition: service_healthy}\n"),
			"services.web.depends_on.client.condition", "condition-no-healthcheck"},
		"no test": {webClientPack("notest", "    healthcheck: {interval: 1s}\n"), "services.web.healthcheck.test", "healthcheck-no-test"},
		"unbounded": {webClientPack("slow", "    healthcheck: {test: [CMD, \"true\"], interval: 1m, retries: 10}\n"),
			"services.web.healthcheck", "healthcheck-unbounded"},
	} {
		_, err := e.m.Admit(ctx, []byte(tc.doc), e.dir, actor)
		if !refusedAs(err, tc.req, tc.code) {
			t.Errorf("%s: %v, want %s refused as %s", name, err, tc.req, tc.code)
		}
	}
}
