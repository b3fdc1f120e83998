package pack

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestHealthcheckAndConditions: healthcheck: in both test forms becomes
// the typed check, test: NONE is disable, and depends_on conditions other
// than service_started are kept by the service depended on.
func TestHealthcheckAndConditions(t *testing.T) {
	doc := `name: t
services:
  web:
    image: b
    depends_on:
      db: {condition: service_healthy}
      migrate: {condition: service_completed_successfully}
      cache: {condition: service_started}
  db:
    image: b
    healthcheck:
      test: ["CMD", "pg_isready"]
      interval: 2s
      timeout: 1s
      retries: 5
      start_period: 3s
  cache:
    image: b
    healthcheck:
      test: redis-cli ping
  migrate:
    image: b
    healthcheck:
      test: ["NONE"]
`
	p, err := Load(context.Background(), []byte(doc), "/pack")
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Service{}
	for _, s := range p.Services {
		by[s.Name] = s
	}
	d := func(v time.Duration) *time.Duration { return &v }
	five := uint64(5)
	if got, want := by["db"].Healthcheck, (&Healthcheck{Test: []string{"CMD", "pg_isready"}, Interval: d(2 * time.Second), Timeout: d(time.Second), StartPeriod: d(3 * time.Second), Retries: &five}); !reflect.DeepEqual(got, want) {
		t.Errorf("db: %+v, want %+v", got, want)
	}
	if got := by["cache"].Healthcheck; got == nil || !reflect.DeepEqual(got.Test, []string{"CMD-SHELL", "redis-cli ping"}) {
		t.Errorf("cache: %+v, want the shell form", got)
	}
	if got := by["migrate"].Healthcheck; got == nil || !got.Disable || got.Test != nil {
		t.Errorf("migrate: %+v, want disabled", got)
	}
	if got, want := by["web"].Conditions, map[string]string{"db": ConditionHealthy, "migrate": ConditionCompleted}; !reflect.DeepEqual(got, want) {
		t.Errorf("web conditions %v, want %v", got, want)
	}
	if got := by["web"].DependsOn; !reflect.DeepEqual(got, []string{"cache", "db", "migrate"}) {
		t.Errorf("web depends on %v", got)
	}
}
