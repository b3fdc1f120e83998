package integration

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/platform"
)

// custody doctor once said the engine was fine whenever it answered _ping
// and docker.probeImage was set, while the egress probe then failed on an
// image the engine did not hold, and admission said only internal-unproved.
// Now doctor looks the probe image up on the isolated engine: one the
// engine does not hold is a warning that says why the egress probe cannot
// run and how to fix it; one it holds is ok.
func TestDoctorSaysWhyTheEgressProbeCannotRun(t *testing.T) {
	testenv.Root(t)
	engine := dockertest.Shared(t)
	runc, version, sha := testenv.Runc(t)
	dir := t.TempDir()
	check := func(image string) platform.Check {
		t.Helper()
		p := filepath.Join(dir, "custodyd.yaml")
		data, err := (&config.Config{Runner: config.Runner{StateDir: "/var/lib/custody",
			Runtime: config.Runtime{Path: runc, Version: version, SHA256: sha}},
			Docker: &config.DockerConfig{Host: engine.Host, ProbeImage: image}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		write(t, p, string(data))
		_, out, errs, _ := clitest.Run(t, time.Minute, "doctor", "--json", "--config", p)
		var rep struct{ Checks []platform.Check }
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("doctor: %v\n%s%s", err, out, errs)
		}
		for _, c := range rep.Checks {
			if c.Name == "docker.engine" {
				return c
			}
		}
		t.Fatalf("no docker.engine check:\n%s", out)
		return platform.Check{}
	}
	if c := check("custody-test/absent:none"); c.Verdict != platform.VerdictWarn ||
		!strings.Contains(c.Detail, `docker.probeImage "custody-test/absent:none" is not on the engine`) ||
		!strings.Contains(c.Detail, "internal-unproved") || !strings.Contains(c.Fix, "docker.probeImage") {
		t.Errorf("a probe image the engine does not hold: %+v", c)
	}
	if c := check(dockertest.ImageRef); c.Verdict != platform.VerdictOK || c.Fix != "" {
		t.Errorf("a probe image the engine holds: %+v", c)
	}
}
