package api_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/custody-dev/custody/api"
)

// headerRecorder keeps the version header of every answer a client got.
type headerRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	got  []string
}

func (h *headerRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	if err == nil {
		h.mu.Lock()
		h.got = append(h.got, r.Method+" "+r.URL.Path+" -> "+resp.Header.Get(api.VersionHeader))
		h.mu.Unlock()
	}
	return resp, err
}

// custodyd announces its API version on every answer of both sockets,
// refusals included, and in its status.
func TestVersionAnnounced(t *testing.T) {
	ctx := context.Background()
	for _, sock := range []string{custodyd.SubmitSocket, custodyd.ControlSocket} {
		rec := &headerRecorder{}
		c := api.NewClient(sock, api.WithTransport(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec }))
		st, err := c.Status(ctx)
		if err != nil || st.APIVersion != api.Version || !api.Compatible(st.APIVersion) {
			t.Fatalf("%s: status %+v, %v", sock, st, err)
		}
		if _, err := c.GetRun(ctx, "no-such-run"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("%s: a run that does not exist: %v", sock, err)
		}
		if len(rec.got) != 2 {
			t.Fatalf("%s: %d answers recorded", sock, len(rec.got))
		}
		for _, g := range rec.got {
			if want := " -> " + api.Version; len(g) < len(want) || g[len(g)-len(want):] != want {
				t.Errorf("%s: %s, want version %s", sock, g, api.Version)
			}
		}
	}
}
