package evidence

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/quantity"
)

// ExportKey is one key of an exported trust file: a name and the public
// key in PEM, written inline so the file stands alone.
type ExportKey struct {
	Name string
	PEM  string
	// NotBefore and NotAfter, when set, are the window the key signed in
	// (from its rotations).
	NotBefore, NotAfter time.Time
	// RevokedAt, when set, is when the key was revoked.
	RevokedAt time.Time
}

// Export is what a trust file written by ExportTrust says.
type Export struct {
	Runners, Issuers []ExportKey
	// MaxAge is how old a receipt may be; zero writes no maxAge (the
	// default, DefaultMaxAge, applies).
	MaxAge time.Duration
	// Tiers are the tiers accepted; empty writes none (production only).
	Tiers []string
}

// ExportTrust writes e as a trust file, and parses the result back with
// ParseTrust, so that what it returns is a trust file custody accepts
// (keys that parse, names that are unique) or an error.
func ExportTrust(e Export) ([]byte, error) {
	f := trustFile{APIVersion: "custody.dev/v1alpha1", Kind: "Trust", Tiers: e.Tiers}
	f.Runners, f.Issuers = exportKeys(e.Runners), exportKeys(e.Issuers)
	if e.MaxAge != 0 {
		d := quantity.Duration(e.MaxAge)
		f.MaxAge = &d
	}
	out, err := yaml.Marshal(&f)
	if err != nil {
		return nil, fmt.Errorf("trust: export: %w", err)
	}
	if _, err := ParseTrust(out, ""); err != nil {
		return nil, fmt.Errorf("trust: export: the file would not parse: %w", err)
	}
	return out, nil
}

func exportKeys(ks []ExportKey) []keyFile {
	out := make([]keyFile, 0, len(ks))
	for _, k := range ks {
		kf := keyFile{Name: k.Name, PublicKeyPEM: k.PEM}
		if !k.NotBefore.IsZero() {
			kf.NotBefore = k.NotBefore.UTC().Format(time.RFC3339Nano)
		}
		if !k.NotAfter.IsZero() {
			kf.NotAfter = k.NotAfter.UTC().Format(time.RFC3339Nano)
		}
		if !k.RevokedAt.IsZero() {
			kf.RevokedAt = k.RevokedAt.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, kf)
	}
	return out
}
