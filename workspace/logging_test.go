package workspace_test

import (
	"maps"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestLogging: logging: with a local driver keeps its compose meaning:
// the engine's container has the driver and its rotation options. A
// driver that ships output elsewhere, and an option custody does not
// model, are refused by name, in one answer.
func TestLogging(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	doc := webClientPack("logs", "    logging:\n      driver: local\n      options: {max-size: 1m, max-file: \"2\"}\n")
	g, err := e.m.Issue(ctx, []byte(doc), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-logs")
	in, err := e.cli.ContainerInspect(ctx, containerOf(t, rep, "web"))
	if err != nil {
		t.Fatal(err)
	}
	if lc := in.HostConfig.LogConfig; lc.Type != "local" || !maps.Equal(lc.Config, map[string]string{"max-size": "1m", "max-file": "2"}) {
		t.Errorf("web's logging on the engine is %+v, want local with max-size 1m, max-file 2", lc)
	}
	if d := e.down(ctx, "ws-logs", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	_, err = e.m.Admit(ctx, []byte(webClientPack("logsbad", "    logging:\n      driver: syslog\n      options: {syslog-address: \"udp://192.0.2.1:514\"}\n")), e.dir, actor)
	if !refusedAs(err, "services.web.logging.driver", "logging-not-local") {
		t.Errorf("syslog: %v, want services.web.logging.driver refused as logging-not-local", err)
	}
	_, err = e.m.Admit(ctx, []byte(webClientPack("logsopt", "    logging:\n      driver: json-file\n      options: {tag: x}\n")), e.dir, actor)
	if !refusedAs(err, "services.web.logging.options.tag", "logging-option-unmodelled") {
		t.Errorf("an unmodelled option: %v, want services.web.logging.options.tag refused as logging-option-unmodelled", err)
	}
}
