package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/workspace"
)

// errNoEngine is what the engine of the pack overlap test answers: the
// verifier's verdict comes before any engine call, so a grant that gets
// past it ends here instead of at a real engine.
var errNoEngine = errors.New("no engine in this test")

// noEngine is an engine custodyd's pack path never gets to use: only its
// identity is asked for, after the grant verified.
type noEngine struct{ workspace.Engine }

func (noEngine) NewWorkspaceID() string { return "w" }

func (noEngine) Profile(context.Context, backend.ProbeJournal) (*backend.PackEngine, error) {
	return nil, errNoEngine
}

// TestPackGrantOverlap: custodyd's pack path verifies pack grants with the
// phase grants' verifier, so a rotation's overlap holds for packs too. A
// real custodyd (newServer) started after an issuer rotation passes a pack
// grant the retired key signed before the rotation (and one of the new
// key) on to the engine; a pack grant the retired key signed valid from
// after the rotation, or one that outlives the overlap window, is refused
// (wrong-issuer, naming the retirement) before any engine call.
func TestPackGrantOverlap(t *testing.T) {
	ctx := context.Background()
	cfg, ks := offlineConfig(t)
	old := ks["issuer"] // kept, as a thief would
	rotatedAt := time.Now().Add(-time.Hour).UTC()
	if _, err := rotateKey(ctx, cfg, "issuer", rotatedAt); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(ctx, cfg, quietLog(), testBackends)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	m, err := workspace.New(s.packConfig(&config.DockerConfig{Host: "unix:///run/engine.sock", SubnetPool: config.DefaultSubnetPool}, noEngine{}))
	if err != nil {
		t.Fatal(err)
	}
	_, polDigest, err := s.currentPolicy()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	mint := func(k *keys.Signer, notBefore, expires time.Time) []byte {
		t.Helper()
		env, err := grant.MintPack(ctx, k, grant.PackPredicate{
			ID: grant.NewID(), Actor: "operator", NotBefore: notBefore.Truncate(time.Second), Expires: expires.Truncate(time.Second),
			PolicyDigest: polDigest, Runner: grant.Runner{ID: s.runnerKeys.Current.ID()},
			Engine: grant.Engine{Name: "docker", Version: "1", APIVersion: "1.45"},
			Pack:   grant.Pack{Project: "overlap", Digest: "sha256:" + strings.Repeat("1", 64)},
			Plan:   json.RawMessage(`{"services":[]}`),
		})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	up := func(env []byte) error {
		_, err := m.Up(ctx, env, "overlap", workspace.Peer{Known: true})
		return err
	}
	for name, env := range map[string][]byte{
		"the retired key, before the rotation": mint(old, rotatedAt.Add(-time.Minute), now.Add(10*time.Minute)),
		"the new key":                          mint(s.issuerKeys.Current, now.Add(-time.Minute), now.Add(10*time.Minute)),
	} {
		if err := up(env); !errors.Is(err, errNoEngine) {
			t.Errorf("a pack grant of %s: %v, want it verified and passed on to the engine", name, err)
		}
	}
	for name, env := range map[string][]byte{
		"valid from after the rotation": mint(old, rotatedAt.Add(time.Minute), now.Add(10*time.Minute)),
		"outliving the overlap window":  mint(old, rotatedAt.Add(-time.Minute), rotatedAt.Add(25*time.Hour)),
	} {
		var ge *grant.Error
		if err := up(env); !errors.As(err, &ge) || ge.Code != grant.CodeWrongIssuer || !strings.Contains(err.Error(), "retired at") {
			t.Errorf("a pack grant of the retired key %s: %v, want wrong-issuer naming the retirement", name, err)
		}
	}
}

// offlineConfig is the configuration of a custodyd that a test builds with
// newServer and does not serve (so it can be stopped, changed on disk and
// started again), with its runner and issuer keys made.
func offlineConfig(t *testing.T) (config.Config, map[string]*keys.Signer) {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	dir := t.TempDir()
	cfg := config.Config{
		Runner:      config.Runner{StateDir: filepath.Join(dir, "state"), RuntimeDir: filepath.Join(dir, "run"), Runtime: runnerPinned(path, version, sha)},
		Policy:      filepath.Join(dir, "policy.yaml"),
		Operators:   []uint32{0},
		MaxGrantTTL: "24h",
	}
	writeFile(t, cfg.Policy, fmt.Sprintf(testPolicy, "sha256:"+strings.Repeat("0", 64), dir))
	keyDir := filepath.Join(cfg.Runner.StateDir, "keys")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ks := map[string]*keys.Signer{}
	for _, name := range []string{"runner", "issuer"} {
		k, _, err := keys.LoadOrCreate(keyDir, name)
		if err != nil {
			t.Fatal(err)
		}
		ks[name] = k
	}
	return cfg, ks
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
