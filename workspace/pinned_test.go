package workspace_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/workspace"
)

// pinnedPolicy is policyYAML with the test image pinned to digest.
func pinnedPolicy(dir, digest string) []byte {
	pol := withEgress(fmt.Sprintf(policyYAML, dir))
	return []byte(strings.Replace(pol, "        - reference: custody-test/busybox:latest\n",
		"        - reference: custody-test/busybox:latest\n          digest: "+digest+"\n", 1))
}

// An image the policy pins to a digest runs as that content: the pinned
// test image goes up and the receipt names its image ID. A digest that no
// image on the engine has (as its ID or a repo digest) is refused at up
// before the grant is spent or anything is created.
func TestPinnedImageDigest(t *testing.T) {
	ctx := testCtx(t)
	cli := dockertest.Shared(t).TestClient(t)
	img, err := cli.ImageInspect(ctx, dockertest.ImageRef)
	must(t, err)
	for _, tc := range []struct {
		name, digest string
		ok           bool
	}{
		{"the engine's image", img.ID, true},
		{"another digest", "sha256:" + strings.Repeat("0", 64), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			must(t, os.WriteFile(filepath.Join(state, "policy.yaml"), pinnedPolicy(filepath.Join(state, "pack"), tc.digest), 0o600))
			e := setup(t, state, nil)
			g, err := e.m.Issue(ctx, []byte(publishedPack), e.dir, actor, 3600e9)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.ok {
				_, err := e.m.Up(ctx, g, "ws-pinned", root)
				if grantCode(err) != grant.CodeImageChanged || !strings.Contains(err.Error(), tc.digest) {
					t.Errorf("up pinned to %s: %v, want %s naming the digest", tc.digest, err, grant.CodeImageChanged)
				}
				if _, err := e.db.GrantUsed(grantID(t, g)); err == nil {
					t.Error("the grant was spent")
				}
				if _, err := e.m.Status(ctx, "ws-pinned"); err == nil {
					t.Error("a workspace was recorded")
				}
				return
			}
			rep := e.up(ctx, g, "ws-pinned")
			res := e.verify(ctx, rep.Receipt, publishedPack)
			if !res.OK || len(res.Receipt.Containers) != 1 || res.Receipt.Containers[0].ImageID != img.ID {
				t.Errorf("receipt of the pinned up: %+v", res.Receipt)
			}
			if d := e.down(ctx, "ws-pinned", true); d.State != workspace.StateClean {
				t.Errorf("down: %s %s", d.State, d.Detail)
			}
		})
	}
}
