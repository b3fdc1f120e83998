package bench_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

func packBench(t *testing.T) (*bench.PackBench, context.Context) {
	t.Helper()
	d := dockertest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	p, err := bench.NewPackBench(ctx, bench.PackOptions{Host: d.Host, Dir: t.TempDir()})
	if errors.Is(err, bench.ErrNoCompose) {
		testenv.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, ctx
}

func clean(ctx context.Context, t *testing.T, p *bench.PackBench, when string) {
	t.Helper()
	left, err := p.Residue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("%s: the engine still holds %v", when, left)
	}
}

// The bench's pack comes up and goes down both ways on one isolated
// daemon, leaving nothing behind: each timed run starts clean.
func TestPackBenchCustodyAndCompose(t *testing.T) {
	p, ctx := packBench(t)
	clean(ctx, t, p, "before")
	for i, name := range []string{"bench-a", "bench-b"} {
		g, err := p.Issue(ctx)
		if err != nil {
			t.Fatalf("issue: %v", err)
		}
		if err := p.Up(ctx, g, name); err != nil {
			t.Fatal(err)
		}
		if left, _ := p.Residue(ctx); len(left) < 5+2+1 {
			t.Fatalf("custody up %d: the engine holds only %v, not 5 containers, 2 networks and a volume", i, left)
		}
		if err := p.Down(ctx, name); err != nil {
			t.Fatal(err)
		}
		clean(ctx, t, p, "after custody down")
		if err := p.ComposeUp(ctx); err != nil {
			t.Fatal(err)
		}
		if left, _ := p.Residue(ctx); len(left) < 5+2+1 {
			t.Fatalf("compose up %d: the engine holds only %v", i, left)
		}
		if err := p.ComposeDown(ctx); err != nil {
			t.Fatal(err)
		}
		clean(ctx, t, p, "after compose down")
	}
}

// A grant spent by one timed up is refused by the next before anything is
// created: the bench cannot reuse a grant and time an up that did no work.
func TestPackBenchGrantSingleUse(t *testing.T) {
	p, ctx := packBench(t)
	g, err := p.Issue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Up(ctx, g, "bench-once"); err != nil {
		t.Fatal(err)
	}
	if err := p.Down(ctx, "bench-once"); err != nil {
		t.Fatal(err)
	}
	err = p.Up(ctx, g, "bench-twice")
	var ge *grant.Error
	if !errors.As(err, &ge) || ge.Code != grant.CodeReplayed {
		t.Fatalf("second up with a spent grant: %v, want a %s refusal", err, grant.CodeReplayed)
	}
	clean(ctx, t, p, "after the refused up")
}

// Without docker-compose the pack row can say why.
func TestPackBenchNoCompose(t *testing.T) {
	_, err := bench.NewPackBench(context.Background(), bench.PackOptions{
		Host: "unix:///nonexistent/docker.sock", Dir: t.TempDir(), Compose: "/nonexistent/docker-compose"})
	if !errors.Is(err, bench.ErrNoCompose) {
		t.Fatalf("got %v, want ErrNoCompose", err)
	}
}
