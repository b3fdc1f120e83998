// Package granttest holds the grant predicates the tests of grant, evidence
// and their users sign: one valid phase predicate and one valid pack
// predicate, each binding every field, so that a test starts from the same
// values as the others and changes only what it is about.
package granttest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/custody-dev/custody/grant"
)

// DigestOf is the sha256 digest of s, as "sha256:<hex>".
func DigestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Predicate is a valid phase grant predicate for the runner key id, valid
// from notBefore to expires, for the canonical phase request phase: a build
// as alice@example.com of a fixed image with two inputs, a 64 MiB output,
// 256 MiB of memory, egress denied and one credential.
func Predicate(runner string, phase json.RawMessage, notBefore, expires time.Time) grant.Predicate {
	entries := []grant.Input{
		{Source: "/home/dev/src", Target: "/src", Digest: DigestOf("src")},
		{Source: "/home/dev/go/pkg/mod", Target: "/mod", Digest: DigestOf("mod")},
	}
	return grant.Predicate{
		ID:           "0123456789abcdef0123456789abcdef",
		Actor:        "alice@example.com",
		Stage:        "build",
		NotBefore:    notBefore,
		Expires:      expires,
		PolicyDigest: DigestOf("policy"),
		Runner:       grant.Runner{ID: runner},
		Runtime:      grant.Runtime{Version: "1.5.3", SHA256: DigestOf("runc")[len("sha256:"):]},
		Image:        "sha256:1111111111111111111111111111111111111111111111111111111111111111",
		Target:       grant.Target{OS: "linux", Arch: "amd64"},
		Toolchain:    "go1.26",
		Inputs:       grant.Inputs{ClosureDigest: grant.ClosureDigest(entries), Entries: entries},
		Output:       grant.Output{Path: "/out", MaxBytes: 64 << 20},
		Resources:    grant.Resources{Memory: 256 << 20, Pids: 64, CPU: 1.5, WallTimeMillis: 300000, TmpBytes: 16 << 20},
		Egress:       grant.Egress{Mode: grant.EgressDeny, Destinations: []string{}},
		Credentials:  []string{"registry-token"},
		Phase:        phase,
	}
}

// PackPredicate is a valid pack grant predicate for the runner key id,
// valid from notBefore to expires: range-op's grant of the pack "range"
// whose compose file is compose and whose admitted plan is plan, on a
// docker engine.
func PackPredicate(runner string, notBefore, expires time.Time, compose, plan string) grant.PackPredicate {
	return grant.PackPredicate{
		ID:           "fedcba9876543210fedcba9876543210",
		Actor:        "range-op",
		NotBefore:    notBefore,
		Expires:      expires,
		PolicyDigest: DigestOf("policy"),
		Runner:       grant.Runner{ID: runner},
		Engine:       grant.Engine{Name: "docker", Version: "26.1.5", APIVersion: "1.45"},
		Pack:         grant.Pack{Project: "range", Digest: DigestOf(compose)},
		Plan:         json.RawMessage(plan),
	}
}
