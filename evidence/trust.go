package evidence

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/quantity"
)

// MaxTrustSize is the largest trust file accepted, in bytes.
const MaxTrustSize = 1 << 20

// Defaults of a trust file.
const (
	DefaultMaxAge            = 24 * time.Hour
	DefaultReceiptsRetention = 720 * time.Hour
	DefaultOutputsRetention  = 168 * time.Hour
)

//go:embed trust.schema.json
var trustSchemaJSON []byte

// TrustSchema returns the JSON Schema (draft 2020-12) that every trust file
// must satisfy. The caller owns the returned slice.
func TrustSchema() []byte { return bytes.Clone(trustSchemaJSON) }

const (
	namePattern = "^[a-z0-9][a-z0-9._-]{0,62}$"
	timePattern = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)

var trustParser = strictyaml.New(strictyaml.Format{
	Subject:    "trust",
	MaxSize:    MaxTrustSize,
	SchemaURL:  "https://custody.dev/schemas/v1alpha1/trust.schema.json",
	Schema:     trustSchemaJSON,
	SchemaName: "trust schema",
	Patterns: map[string]string{
		namePattern:              "use 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit",
		timePattern:              "write an RFC 3339 time such as 2026-01-01T00:00:00Z",
		quantity.DurationPattern: "write a positive duration such as 30m, 24h or 720h",
	},
})

// Problem is one reason a trust file is refused.
type Problem = strictyaml.Problem

// ValidationError lists every problem found in a trust file. Its Subject is
// "trust".
type ValidationError = strictyaml.ValidationError

// Trust is a parsed trust file: the keys a verifier trusts and the
// operator's acceptance rules.
type Trust struct {
	// Runners are the runner identity keys allowed to sign receipts.
	Runners []TrustedKey
	// Issuers are the grant-issuer keys.
	Issuers []TrustedKey
	// MaxAge bounds how long ago a promotable receipt's run finished.
	MaxAge time.Duration
	// Tiers are the accepted tiers (TierProduction, TierDevelopment).
	Tiers []string
	// Statuses are the exit statuses acceptable for promotion.
	Statuses []string
	// RequireCleanVerified requires verified cleanup for promotion.
	RequireCleanVerified bool
	// AcceptBeforeRevocation accepts receipts that a revoked key signed
	// before its revocation time (revocation.acceptBefore).
	AcceptBeforeRevocation bool
	// ReceiptsRetention and OutputsRetention are recorded for the daemon,
	// which enforces them.
	ReceiptsRetention time.Duration
	OutputsRetention  time.Duration
	// Digest is "sha256:<hex>" of the exact trust file bytes.
	Digest string
	// Path is the trust file's absolute path, when it was loaded from one.
	Path string
}

// TrustedKey is one trusted key and its validity. A runner key's window
// and revocation are judged at the receipt's finish time (when the runner
// signed it); an issuer key's at the run's start time (when the grant was
// used).
type TrustedKey struct {
	// Name is the operator's label for the key.
	Name string
	// Key is the public key.
	Key *keys.Verifier
	// NotBefore and NotAfter, when set, bound when the key may sign:
	// NotBefore <= t < NotAfter.
	NotBefore, NotAfter time.Time
	// RevokedAt, when set, is when the key was revoked: what it signed at
	// or after RevokedAt is refused, and what it signed before is accepted
	// only if the trust file says revocation.acceptBefore.
	RevokedAt time.Time
}

// ID returns the key's keys.KeyID.
func (k *TrustedKey) ID() string { return k.Key.ID() }

// validAt says why the key may not sign at t, or "" if it may.
func (k *TrustedKey) validAt(t time.Time) string {
	switch {
	case !k.NotBefore.IsZero() && t.Before(k.NotBefore):
		return fmt.Sprintf("key %q (%s) is valid from %s; the time checked is %s", k.Name, k.ID(), k.NotBefore.Format(time.RFC3339), t.Format(time.RFC3339Nano))
	case !k.NotAfter.IsZero() && !t.Before(k.NotAfter):
		return fmt.Sprintf("key %q (%s) is valid until %s; the time checked is %s", k.Name, k.ID(), k.NotAfter.Format(time.RFC3339), t.Format(time.RFC3339Nano))
	}
	return ""
}

// revokedAt says why the key's signature at t is refused for revocation,
// or "" if it is not.
func (k *TrustedKey) revokedAt(t time.Time, acceptBefore bool) string {
	switch {
	case k.RevokedAt.IsZero():
		return ""
	case !t.Before(k.RevokedAt):
		return fmt.Sprintf("key %q (%s) was revoked at %s; the time checked, %s, is not before it", k.Name, k.ID(), k.RevokedAt.Format(time.RFC3339), t.Format(time.RFC3339Nano))
	case !acceptBefore:
		return fmt.Sprintf("key %q (%s) was revoked at %s and revocation.acceptBefore is false, so nothing it signed is accepted", k.Name, k.ID(), k.RevokedAt.Format(time.RFC3339))
	}
	return ""
}

// trustFile is the YAML form of a trust file.
type trustFile struct {
	APIVersion string             `yaml:"apiVersion"`
	Kind       string             `yaml:"kind"`
	Runners    []keyFile          `yaml:"runners,omitempty"`
	Issuers    []keyFile          `yaml:"issuers,omitempty"`
	MaxAge     *quantity.Duration `yaml:"maxAge,omitempty"`
	Tiers      []string           `yaml:"tiers,omitempty"`
	Accept     struct {
		Statuses             []string `yaml:"statuses,omitempty"`
		RequireCleanVerified *bool    `yaml:"requireCleanVerified,omitempty"`
	} `yaml:"accept,omitempty"`
	Revocation struct {
		AcceptBefore bool `yaml:"acceptBefore,omitempty"`
	} `yaml:"revocation,omitempty"`
	Retention struct {
		Receipts *quantity.Duration `yaml:"receipts,omitempty"`
		Outputs  *quantity.Duration `yaml:"outputs,omitempty"`
	} `yaml:"retention,omitempty"`
}

type keyFile struct {
	Name         string `yaml:"name,omitempty"`
	PublicKey    string `yaml:"publicKey,omitempty"`
	PublicKeyPEM string `yaml:"publicKeyPEM,omitempty"`
	NotBefore    string `yaml:"notBefore,omitempty"`
	NotAfter     string `yaml:"notAfter,omitempty"`
	RevokedAt    string `yaml:"revokedAt,omitempty"`
}

// LoadTrust reads and parses the trust file at path. Relative public key
// paths are resolved against the directory holding the file.
func LoadTrust(path string) (*Trust, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	data, err := trustParser.ReadFile(abs)
	if err != nil {
		return nil, err
	}
	t, err := ParseTrust(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Path = abs
	return t, nil
}

// ParseTrust parses a trust file strictly: one YAML document, no anchors,
// aliases or merge keys, no unknown fields, every value checked. Relative
// publicKey paths are resolved against baseDir. Problems with the content
// are returned together as a *ValidationError.
func ParseTrust(data []byte, baseDir string) (*Trust, error) {
	var f trustFile
	if err := trustParser.Decode(data, &f); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	t := &Trust{
		MaxAge:                 DefaultMaxAge,
		Tiers:                  []string{TierProduction},
		Statuses:               []string{StatusOK},
		RequireCleanVerified:   true,
		AcceptBeforeRevocation: f.Revocation.AcceptBefore,
		ReceiptsRetention:      DefaultReceiptsRetention,
		OutputsRetention:       DefaultOutputsRetention,
		Digest:                 "sha256:" + hex.EncodeToString(sum[:]),
	}
	var ps []Problem
	add := func(field, reason, fix string) { ps = append(ps, Problem{Field: field, Reason: reason, Fix: fix}) }

	ids := make(map[string]string) // key ID -> field of its first listing
	names := make(map[string]bool)
	loadKeys := func(list string, in []keyFile) []TrustedKey {
		out := make([]TrustedKey, 0, len(in))
		for i, kf := range in {
			field := fmt.Sprintf("%s[%d]", list, i)
			k, ok := loadKey(field, kf, baseDir, add)
			if !ok {
				continue
			}
			if names[list+"/"+kf.Name] {
				add(field+".name", fmt.Sprintf("%q appears twice in %s", kf.Name, list), "give every key its own name")
			}
			names[list+"/"+kf.Name] = true
			if prev, dup := ids[k.ID()]; dup {
				add(field, fmt.Sprintf("key %s is already listed at %s", k.ID(), prev),
					"list each key once; a runner key must not also be an issuer key")
				continue
			}
			ids[k.ID()] = field
			out = append(out, k)
		}
		return out
	}
	t.Runners = loadKeys("runners", f.Runners)
	t.Issuers = loadKeys("issuers", f.Issuers)

	if f.MaxAge != nil {
		t.MaxAge = time.Duration(*f.MaxAge)
	}
	if len(f.Tiers) > 0 {
		t.Tiers = uniqueList("tiers", f.Tiers, add)
	}
	if len(f.Accept.Statuses) > 0 {
		t.Statuses = uniqueList("accept.statuses", f.Accept.Statuses, add)
	}
	if f.Accept.RequireCleanVerified != nil {
		t.RequireCleanVerified = *f.Accept.RequireCleanVerified
	}
	if f.Retention.Receipts != nil {
		t.ReceiptsRetention = time.Duration(*f.Retention.Receipts)
	}
	if f.Retention.Outputs != nil {
		t.OutputsRetention = time.Duration(*f.Retention.Outputs)
	}
	if len(ps) > 0 {
		return nil, &ValidationError{Subject: "trust", Problems: ps}
	}
	return t, nil
}

func uniqueList(field string, in []string, add func(field, reason, fix string)) []string {
	out := make([]string, 0, len(in))
	for i, s := range in {
		if slices.Contains(out, s) {
			add(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("%q appears twice", s), "list it once")
			continue
		}
		out = append(out, s)
	}
	return out
}

// loadKey checks one key entry and loads its public key.
func loadKey(field string, kf keyFile, baseDir string, add func(field, reason, fix string)) (TrustedKey, bool) {
	k := TrustedKey{Name: kf.Name}
	ok := true
	parseTime := func(sub, s string) time.Time {
		if s == "" {
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			add(field+"."+sub, fmt.Sprintf("%q is not an RFC 3339 time: %v", s, err), "write a time such as 2026-01-01T00:00:00Z")
			ok = false
			return time.Time{}
		}
		return t.UTC()
	}
	k.NotBefore = parseTime("notBefore", kf.NotBefore)
	k.NotAfter = parseTime("notAfter", kf.NotAfter)
	k.RevokedAt = parseTime("revokedAt", kf.RevokedAt)
	if !k.NotBefore.IsZero() && !k.NotAfter.IsZero() && !k.NotBefore.Before(k.NotAfter) {
		add(field+".notAfter", fmt.Sprintf("%s is not after notBefore %s", kf.NotAfter, kf.NotBefore), "make the validity window non-empty")
		ok = false
	}

	var err error
	switch {
	case kf.PublicKey != "" && kf.PublicKeyPEM != "":
		add(field, "both publicKey and publicKeyPEM are set", "keep one")
		return k, false
	case kf.PublicKey != "":
		p := kf.PublicKey
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		// Refuse anything but a regular file before opening it, so that a
		// fifo or device cannot block or flood the parser.
		if fi, serr := os.Stat(p); serr != nil {
			err = fmt.Errorf("keys: %w", serr)
		} else if !fi.Mode().IsRegular() {
			err = fmt.Errorf("keys: %s is not a regular file", p)
		} else {
			k.Key, err = keys.LoadPublic(p)
		}
		if err != nil {
			add(field+".publicKey", err.Error(), "give the path, relative to the trust file, of a PEM P-256 public key (a .pub file custodyd writes)")
			return k, false
		}
	case kf.PublicKeyPEM != "":
		k.Key, err = keys.ParsePublic([]byte(kf.PublicKeyPEM))
		if err != nil {
			add(field+".publicKeyPEM", err.Error(), "paste a single PEM \"PUBLIC KEY\" block of a P-256 key")
			return k, false
		}
	default:
		add(field, "no publicKey or publicKeyPEM", "set publicKey to a key file path or publicKeyPEM to an inline PEM key")
		return k, false
	}
	return k, ok
}
