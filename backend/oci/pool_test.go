package oci_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/oci"
)

func (h *harness) heldSpec() backend.HeldSpec {
	return backend.HeldSpec{Rootfs: h.rootfs, Hostname: "custody", OutputPath: "/out", OutputBytes: 4 << 20,
		TmpBytes: 8 << 20, Memory: 64 << 20, Pids: 64, CPU: 1, FileSize: 64 << 20}
}

func (h *harness) hold(t *testing.T, id string) backend.Held {
	t.Helper()
	hd, err := h.b.PrepareHeld(context.Background(), id, h.heldSpec(), nil)
	if err != nil {
		if hd != nil {
			hd.Destroy(context.Background())
		}
		t.Fatalf("prepare held: %v", err)
	}
	return hd
}

func snapshotDir(t *testing.T, name, content string) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "secret"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPooledInputsAreTheirOwn holds two containers at their gates at the
// same time, attaches a different input to each, and runs both: each sees
// its own input, read-only, and not the other's (legitimate use beside the
// refusal: the other's path is absent, a write is refused); a second Take
// of a container is refused; both clean up verified.
func TestPooledInputsAreTheirOwn(t *testing.T) {
	for _, userns := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-userns", true: "userns"}[userns], func(t *testing.T) {
			h := newHarness(t, userns)
			ctx := context.Background()
			ownNS, _ := os.Readlink("/proc/self/ns/mnt")
			defer func() {
				// The attach enters the container's namespace on a thread
				// of its own; the process (its main thread) never does.
				if now, _ := os.Readlink("/proc/self/ns/mnt"); now != ownNS {
					t.Errorf("the process's mount namespace is now %s, was %s", now, ownNS)
				}
			}()
			a, b := h.hold(t, "custody-pool-a"), h.hold(t, "custody-pool-b")
			if a.Alive() != nil || b.Alive() != nil || a.PreparedAt().IsZero() {
				t.Fatalf("held containers not alive: %v %v", a.Alive(), b.Alive())
			}
			script := "cat /in/a/secret 2>&1; cat /in/b/secret 2>&1; echo x > /in/a/secret 2>&1 || echo ro-a; echo x > /in/b/secret 2>&1 || echo ro-b; ls /out | wc -l; echo done > /out/o"
			att := func(target, src string) backend.Attachment {
				return backend.Attachment{Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/bin"}, Cwd: "/",
					Inputs: []backend.Mount{{Source: src, Target: target}}}
			}
			sa, err := a.Take(ctx, att("/in/a", snapshotDir(t, "a", "alpha-only")))
			if err != nil {
				a.Destroy(ctx)
				b.Destroy(ctx)
				t.Fatalf("take a: %v", err)
			}
			if _, err := a.Take(ctx, att("/in/a", snapshotDir(t, "a2", "again"))); err == nil {
				t.Error("a second Take of one held container was allowed")
			}
			sb, err := b.Take(ctx, att("/in/b", snapshotDir(t, "b", "bravo-only")))
			if err != nil {
				sa.Cleanup(ctx)
				b.Destroy(ctx)
				t.Fatalf("take b: %v", err)
			}
			// The receipt binds the go-ahead each one ran: its own.
			for _, c := range []struct {
				s   backend.Sandbox
				att backend.Attachment
			}{{sa, att("/in/a", "")}, {sb, att("/in/b", "")}} {
				msg, err := oci.EncodeGoAhead(c.att)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := c.s.Evidence()["goahead"], fmt.Sprintf("%x", sha256.Sum256(msg)); got != want {
					t.Errorf("goahead evidence %q, want %q", got, want)
				}
			}
			other, _ := oci.EncodeGoAhead(backend.Attachment{Args: []string{"/bin/true"}, Cwd: "/"})
			if got := sa.Evidence()["goahead"]; got == "" || got == fmt.Sprintf("%x", sha256.Sum256(other)) {
				t.Errorf("goahead evidence %q does not tell the command apart", got)
			}
			run := func(s backend.Sandbox) (string, *backend.Exit) {
				var out bytes.Buffer
				ex, err := s.Run(ctx, 10*time.Second, backend.IO{Stdout: &out, Stderr: &out})
				if err != nil {
					t.Errorf("run: %v (%q)", err, out.String())
				}
				if got, err := os.ReadFile(filepath.Join(s.Output().Dir(), "o")); err != nil || string(got) != "done\n" {
					t.Errorf("output: %q, %v", got, err)
				}
				if rep := s.Cleanup(ctx); !rep.Verified {
					t.Errorf("cleanup not verified: %+v", rep)
				}
				return out.String(), ex
			}
			outA, exA := run(sa)
			outB, _ := run(sb)
			if !strings.Contains(outA, "alpha-only") || strings.Contains(outA, "bravo-only") || !strings.Contains(outA, "ro-a") {
				t.Errorf("a saw %q: want its own input, read-only, and not b's", outA)
			}
			if !strings.Contains(outB, "bravo-only") || strings.Contains(outB, "alpha-only") || !strings.Contains(outB, "ro-b") {
				t.Errorf("b saw %q: want its own input, read-only, and not a's", outB)
			}
			if exA != nil {
				ro := false
				for _, m := range exA.Observation.Mounts {
					if m.Target == "/in/a" {
						ro = m.ReadOnly
					}
				}
				if !ro || exA.Observation.Seccomp != "filter" {
					t.Errorf("observation after attach: %+v, want /in/a read-only and a seccomp filter", exA.Observation)
				}
			}
		})
	}
}

// TestHeldDestroyedClean destroys a held container that no grant took:
// nothing runs, and every part is verified gone.
func TestHeldDestroyedClean(t *testing.T) {
	h := newHarness(t, true)
	hd := h.hold(t, "custody-pool-idle")
	if rep := hd.Destroy(context.Background()); !rep.Verified {
		t.Fatalf("destroy not verified: %+v", rep)
	}
	if hd.Alive() == nil {
		t.Fatal("a destroyed container says it is alive")
	}
	if _, err := hd.Take(context.Background(), backend.Attachment{Args: []string{"/bin/true"}, Cwd: "/"}); err == nil {
		t.Fatal("a destroyed container was taken")
	}
}
