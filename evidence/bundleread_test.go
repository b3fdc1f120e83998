package evidence_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
)

// A bundle written by Bundle gives back its envelope byte for byte, and
// matches it; one whose payload, signature or key hint was changed does
// not, naming what differs; a bundle of another media type is refused.
func TestBundleRoundTripAndMismatch(t *testing.T) {
	f := newFixture(t)
	b, err := evidence.Bundle(f.env, "")
	if err != nil {
		t.Fatal(err)
	}
	if !evidence.IsBundle(b) || evidence.IsBundle(f.env) {
		t.Fatal("IsBundle does not tell a bundle from an envelope")
	}
	env, err := evidence.EnvelopeOfBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(env, bytes.TrimSpace(f.env)) {
		t.Fatalf("the bundle's envelope is not the envelope:\n%s\n%s", env, f.env)
	}
	if err := evidence.MatchBundle(f.env, b); err != nil {
		t.Fatal(err)
	}
	if res := f.verify(t, f.trust(t, "", ""), env); !res.OK {
		t.Fatalf("the envelope out of the bundle does not verify:%s", describe(res))
	}

	other := newFixture(t)
	ob, err := evidence.Bundle(other.env, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := evidence.MatchBundle(f.env, ob); !errors.Is(err, evidence.ErrBundleMismatch) || !strings.Contains(err.Error(), "payload") {
		t.Fatalf("another receipt's bundle: %v", err)
	}
	hinted, err := evidence.Bundle(f.env, "sha256:"+strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	if err := evidence.MatchBundle(f.env, hinted); !errors.Is(err, evidence.ErrBundleMismatch) || !strings.Contains(err.Error(), "key hint") {
		t.Fatalf("a bundle naming another key: %v", err)
	}
	for name, bad := range map[string][]byte{
		"media type":  bytes.Replace(b, []byte("bundle.v0.3+json"), []byte("bundle.v0.1+json"), 1),
		"not JSON":    []byte("{"),
		"extra field": bytes.Replace(b, []byte(`"mediaType"`), []byte(`"frob": 1, "mediaType"`), 1),
	} {
		if _, err := evidence.EnvelopeOfBundle(bad); err == nil || errors.Is(err, evidence.ErrBundleMismatch) {
			t.Errorf("%s: EnvelopeOfBundle = %v, want a refusal", name, err)
		}
	}
}

func FuzzEnvelopeOfBundle(f *testing.F) {
	fx := newFixture(f)
	b, err := evidence.Bundle(fx.env, "")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := evidence.EnvelopeOfBundle(data)
		if err != nil {
			return
		}
		// Whatever it accepts, it gives back as an envelope that matches it.
		if err := evidence.MatchBundle(env, data); err != nil {
			t.Fatalf("an accepted bundle does not match its own envelope: %v", err)
		}
	})
}

// BundleCompact is Bundle's bytes compacted, and Bundle is the same
// indented form it always was (compact first, then indent); a broken
// envelope is refused by both.
func TestBundleCompactIsBundleCompacted(t *testing.T) {
	f := newFixture(t)
	for _, hint := range []string{"", "sha256:" + strings.Repeat("cd", 32)} {
		b, err := evidence.Bundle(f.env, hint)
		if err != nil {
			t.Fatal(err)
		}
		c, err := evidence.BundleCompact(f.env, hint)
		if err != nil {
			t.Fatal(err)
		}
		var want, again bytes.Buffer
		if err := json.Compact(&want, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c, want.Bytes()) {
			t.Fatalf("BundleCompact is not the bundle compacted:\n got %s\nwant %s", c, want.Bytes())
		}
		if err := json.Indent(&again, c, "", "  "); err != nil {
			t.Fatal(err)
		}
		again.WriteByte('\n')
		if !bytes.Equal(b, again.Bytes()) {
			t.Fatalf("Bundle is not the compact bundle indented:\n got %s\nwant %s", b, again.Bytes())
		}
	}
	if _, err := evidence.BundleCompact([]byte("{"), ""); err == nil {
		t.Fatal("BundleCompact of a broken envelope did not refuse")
	}
}
