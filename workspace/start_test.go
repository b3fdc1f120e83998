package workspace

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
)

// startEngine records the order of starts and how many overlap; only
// Start is used.
type startEngine struct {
	Engine
	mu       sync.Mutex
	running  int
	peak     int
	order    []string
	failName string
}

func (e *startEngine) Start(_ context.Context, _ backend.PackOwner, _ backend.Recorder, r backend.Resource) error {
	e.mu.Lock()
	e.running++
	e.peak = max(e.peak, e.running)
	e.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running--
	if r.Name == e.failName {
		return errors.New("refused")
	}
	e.order = append(e.order, r.Name)
	return nil
}

func startFixture() ([]admission.PlanService, []backend.Resource) {
	services := startOrder([]admission.PlanService{
		{Name: "cache"}, {Name: "db"}, {Name: "edge"},
		{Name: "web", DependsOn: []string{"db", "cache"}}, {Name: "worker", DependsOn: []string{"db"}},
	})
	made := make([]backend.Resource, len(services))
	for i, s := range services {
		made[i] = backend.Resource{Name: s.Name}
	}
	return services, made
}

// Independent services start side by side; each starts only after what it
// depends on has started.
func TestStartAllRespectsDependsOn(t *testing.T) {
	e := &startEngine{}
	m := &Manager{cfg: Config{Engine: e}}
	services, made := startFixture()
	if err := m.startAll(context.Background(), backend.PackOwner{}, nil, services, made, noCheck); err != nil {
		t.Fatal(err)
	}
	pos := func(n string) int { return slices.Index(e.order, n) }
	if len(e.order) != 5 || pos("web") < pos("db") || pos("web") < pos("cache") || pos("worker") < pos("db") {
		t.Errorf("start order %v breaks depends_on", e.order)
	}
	if e.peak < 2 || e.peak > maxParallel {
		t.Errorf("%d starts overlapped at most; want 2..%d", e.peak, maxParallel)
	}
}

// A service whose dependency failed to start is never started, and the
// failure is the error.
func TestStartAllStopsAfterFailure(t *testing.T) {
	e := &startEngine{failName: "db"}
	m := &Manager{cfg: Config{Engine: e}}
	services, made := startFixture()
	err := m.startAll(context.Background(), backend.PackOwner{}, nil, services, made, noCheck)
	if err == nil {
		t.Fatal("a failed start was not reported")
	}
	if slices.Contains(e.order, "web") || slices.Contains(e.order, "worker") {
		t.Errorf("started %v although their dependency db failed", e.order)
	}
}

func noCheck(int) error { return nil }
