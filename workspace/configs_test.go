package workspace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// configsPack gives web a config file from the pack's directory and one
// written in the pack.
var configsPack = webClientPack("configs", `    configs:
      - app
      - source: banner
        target: /etc/banner
        mode: 0440
`) + `configs:
  app:
    file: ./conf/app.conf
  banner:
    content: "hello from the pack"
`

// TestConfigs: a config file inside the pack's directory is read at grant
// issue without following links and bound by digest: up delivers the
// granted bytes read-only (0444 by default), even after the file changed,
// next to a content config; a config file that is a link, even one that
// stays inside the directory, is refused by name.
func TestConfigs(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	conf := filepath.Join(e.dir, "conf", "app.conf")
	must(t, os.MkdirAll(filepath.Dir(conf), 0o755))
	must(t, os.WriteFile(conf, []byte("granted=1\n"), 0o644))
	g, err := e.m.Issue(ctx, []byte(configsPack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	// Changed after the grant: up delivers what was granted.
	must(t, os.WriteFile(conf, []byte("changed=1\n"), 0o644))
	rep := e.up(ctx, g, "ws-configs")
	web := containerOf(t, rep, "web")
	for cmd, want := range map[string]string{
		"cat /app; stat -c %a /app":                     "granted=1\n444",
		"cat /etc/banner; echo; stat -c %a /etc/banner": "hello from the pack\n440",
		"(echo x >> /app) 2>/dev/null && echo writable": "",
	} {
		out, _ := execIn(ctx, t, e.cli, web, "sh", "-c", cmd)
		if strings.TrimSpace(out) != want {
			t.Errorf("%s: %q, want %q", cmd, out, want)
		}
	}
	if res := e.verify(ctx, rep.Receipt, configsPack); !res.OK || !res.Acceptable {
		t.Errorf("up receipt: %+v", res.Checks)
	}
	if d := e.down(ctx, "ws-configs", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	// A link, even to a file inside the directory, is refused.
	must(t, os.Remove(conf))
	must(t, os.WriteFile(filepath.Join(e.dir, "conf", "real.conf"), []byte("x"), 0o644))
	must(t, os.Symlink("real.conf", conf))
	_, err = e.m.Admit(ctx, []byte(configsPack), e.dir, actor)
	if !refusedAs(err, "services.web.configs.app", "config-unreadable") || !strings.Contains(err.Error(), "link") {
		t.Errorf("a config file that is a link: %v, want config-unreadable naming the link", err)
	}
}
