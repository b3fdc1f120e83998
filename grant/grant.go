// Package grant mints and verifies custody grants.
//
// A grant is the operator's single-use, scoped authorization for one phase
// to run on one runner. custodyd mints it; the runner verifies it and then
// re-derives, at launch, everything the grant binds (policy, runtime, image,
// inputs, target, runner identity) and refuses the launch if anything
// differs.
//
// # Format
//
// A grant is a DSSE envelope (https://github.com/secure-systems-lab/dsse)
// with payload type [predicate.PayloadType] whose payload is an in-toto
// Statement v1 (https://in-toto.io/Statement/v1) with predicate type
// [predicate.Grant]:
//
//	{"_type":"https://in-toto.io/Statement/v1",
//	 "subject":[{"name":"phase/<name>","digest":{"sha256":"<hex>"}}],
//	 "predicateType":"https://custody.dev/attestation/grant/v1",
//	 "predicate":{...}}
//
// The predicate is a [Predicate]. Its phase field is the canonical phase
// request JSON the grant authorizes, embedded verbatim; the subject digest is
// the SHA-256 of exactly those bytes, and the subject name is "phase/"
// followed by the phase's name.
//
// The statement is serialized by encoding/json (struct field order, map keys
// sorted, no insignificant whitespace, no HTML escaping) rather than by
// protojson: protojson output is deliberately unstable and its Struct
// predicate would reorder the embedded phase and round integers through
// float64, so the subject digest could not cover the phase bytes as signed.
// [Mint] checks every statement it emits with in-toto's own parser and
// Statement.Validate.
//
// # Verification
//
// [Verifier.Verify] is strict. The envelope may be at most [MaxEnvelopeSize]
// bytes; it must be a JSON object with exactly the fields payloadType,
// payload and signatures, each once; payload and signatures are standard,
// padded base64; there are 1 to [MaxSignatures] signatures, each with
// exactly the fields keyid and sig, a non-empty keyid (the signing key's
// keys.KeyID) and no keyid twice. The signature is checked over the DSSE
// pre-authentication encoding against the verifier's trusted keys only. The
// statement must be in the canonical form [Mint] produces, byte for byte, so
// that duplicate, unknown or differently-cased fields, alternative number or
// string encodings and trailing data are all refused. Verify then checks the
// subject against the phase, validates the predicate as [Mint] does, and
// checks the validity window.
//
// Verify does not know about revocation or single use: the caller must
// refuse a grant whose Predicate.ID was revoked or already used
// ([CodeRevoked], [CodeReplayed]). Key replay protection on Predicate.ID,
// never on Grant.EnvelopeDigest: the envelope JSON and ECDSA signatures are
// malleable, so one grant has many valid envelope encodings.
//
// # Pack grants
//
// A pack grant is the operator's single-use, scoped authorization to bring
// one admitted pack up on one runner, against the engine it was admitted
// against. It has the envelope, encoding and verification of a phase grant
// ([MintPack], [Verifier.VerifyPack]) with predicate type [predicate.PackGrant]
// and a [PackPredicate]:
//
//	{"_type":"https://in-toto.io/Statement/v1",
//	 "subject":[{"name":"pack/<project>","digest":{"sha256":"<hex>"}}],
//	 "predicateType":"https://custody.dev/attestation/pack-grant/v1",
//	 "predicate":{...}}
//
// The predicate's plan is the admitted plan's canonical JSON, embedded
// verbatim; the subject digest is the SHA-256 of exactly those bytes and the
// subject name is "pack/" followed by the pack's project name. Replay and
// revocation are the caller's, keyed on PackPredicate.ID, as for phases.
//
// Refusals are [*Error] values whose [Code] callers branch on with
// errors.As; the codes decided by callers are defined here too, so that
// every grant refusal reason lives in one place.
package grant

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/internal/randid"
)

// Egress modes.
const (
	// EgressDeny is no network beyond loopback.
	EgressDeny = "deny"
	// EgressRestricted is the run's egress proxy to Destinations only.
	EgressRestricted = "egress"
)

// Predicate is the body of a grant. It binds everything the runner
// re-derives at launch.
type Predicate struct {
	// ID identifies the grant: 128 random bits as 32 lowercase hex digits
	// (see [NewID]). It is the key for revocation and single use.
	ID string `json:"id"`
	// Actor is who the grant was issued to.
	Actor string `json:"actor"`
	// Stage is the pipeline stage the phase performs.
	Stage string `json:"stage"`
	// NotBefore and Expires bound when the grant may be used:
	// NotBefore <= now < Expires.
	NotBefore time.Time `json:"notBefore"`
	Expires   time.Time `json:"expires"`
	// PolicyDigest is "sha256:<hex>" of the exact policy file bytes.
	PolicyDigest string `json:"policyDigest"`
	// Runner is the runner the grant is for.
	Runner Runner `json:"runner"`
	// Runtime is the pinned container runtime.
	Runtime Runtime `json:"runtime"`
	// Image is the image content digest, "sha256:<hex>": the tree digest
	// (treehash) of an image all of whose files are root's, and otherwise
	// the digest of that tree's manifest followed by its owners (see
	// package image, imageDigest), so that the grant binds the owners too.
	Image string `json:"image"`
	// ImageRef binds the manifest and config digests the image was
	// imported by, beside its content digest; nil for a rootfs import,
	// which has neither.
	ImageRef *ImageRef `json:"imageRef,omitempty"`
	// Process binds what runs: the command, environment, working
	// directory and user as admission resolved them from the phase and the
	// image's config. Grants issued before it existed omit it and no
	// longer admit a launch.
	Process *Process `json:"process,omitempty"`
	// Target is the platform the phase runs on.
	Target Target `json:"target"`
	// Toolchain is the informational toolchain label of the phase.
	Toolchain string `json:"toolchain,omitempty"`
	// Inputs are the input snapshots and their closure digest.
	Inputs Inputs `json:"inputs"`
	// Output is the output directory and its size bound.
	Output Output `json:"output"`
	// Resources are the admitted budgets.
	Resources Resources `json:"resources"`
	// Egress is the network the phase gets.
	Egress Egress `json:"egress"`
	// Credentials names the credentials granted; names only, never secrets.
	Credentials []string `json:"credentials"`
	// Brokered binds each granted credential's destination; absent in
	// grants without credentials.
	Brokered []Brokered `json:"brokered,omitempty"`
	// Phase is the canonical phase request JSON the grant authorizes: a
	// compact JSON object (no insignificant whitespace) with a "name"
	// member. Its SHA-256 is the statement's subject digest.
	Phase json.RawMessage `json:"phase"`
}

// Runner identifies a runner.
type Runner struct {
	// ID is the keys.KeyID of the runner identity key.
	ID string `json:"id"`
}

// Runtime is the pinned container runtime.
type Runtime struct {
	// Version is the runtime's version, e.g. "1.5.3".
	Version string `json:"version"`
	// SHA256 is the lowercase hex SHA-256 of the runtime binary (64 hex
	// digits, no "sha256:" prefix, as in the runner configuration).
	SHA256 string `json:"sha256"`
}

// ImageRef is how an image imported from an OCI layout or archive is
// named by its own digests.
type ImageRef struct {
	// Manifest is the manifest's digest; empty for a classic docker-save
	// archive, which has none (Config binds it).
	Manifest string `json:"manifest,omitempty"`
	// Config is the config blob's digest.
	Config string `json:"config"`
}

// Process is the workload's process as the launch runs it.
type Process struct {
	Command []string          `json:"command"`
	Env     map[string]string `json:"env"`
	Workdir string            `json:"workdir"`
	UID     uint32            `json:"uid"`
	GID     uint32            `json:"gid"`
	// StopSignal is the signal a timeout or cancellation sends first
	// (e.g. "SIGTERM"); empty: SIGKILL alone.
	StopSignal string `json:"stopSignal,omitempty"`
}

// Target is an operating system and architecture, as GOOS and GOARCH.
type Target struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// Inputs are the phase's input snapshots.
type Inputs struct {
	// ClosureDigest is [ClosureDigest] of Entries.
	ClosureDigest string `json:"closureDigest"`
	// Entries are the inputs, one per target path.
	Entries []Input `json:"entries"`
}

// Input is one input snapshot as a grant binds it. It stays apart from the
// domain's admission.Input on purpose: it is a signed format, so its shape
// may not follow the domain's (a field added there must not change what a
// grant's signature covers).
type Input struct {
	// Source is the host path the snapshot was taken from.
	Source string `json:"source"`
	// Target is the absolute mount point inside the container.
	Target string `json:"target"`
	// Digest is the snapshot's tree digest, "sha256:<hex>".
	Digest string `json:"digest"`
}

// Output is the single writable output directory.
type Output struct {
	// Path is the absolute path inside the container.
	Path string `json:"path"`
	// MaxBytes is the hard size bound, in bytes.
	MaxBytes int64 `json:"maxBytes"`
	// MaxFiles bounds the output's entries. Grants issued before it
	// existed omit it (0) and no longer admit a launch.
	MaxFiles int64 `json:"maxFiles,omitempty"`
}

// Resources are the admitted budgets.
type Resources struct {
	// Memory is the memory limit in bytes.
	Memory int64 `json:"memory"`
	// Pids is the process limit.
	Pids int64 `json:"pids"`
	// CPU is the CPU limit in cores; zero means no CPU limit.
	CPU float64 `json:"cpu"`
	// WallTimeMillis is the wall-clock limit in milliseconds.
	WallTimeMillis int64 `json:"wallTimeMillis"`
	// TmpBytes is the size bound of /tmp in bytes.
	TmpBytes int64 `json:"tmpBytes"`
	// Nofile is the open-file limit; grants issued before it existed
	// omit it and no longer admit a launch.
	Nofile int64 `json:"nofile,omitempty"`
}

// Egress is the network a phase gets.
type Egress struct {
	// Mode is [EgressDeny] or [EgressRestricted].
	Mode string `json:"mode"`
	// Destinations are the exact host:port destinations of
	// [EgressRestricted]; empty when Mode is [EgressDeny].
	Destinations []string `json:"destinations"`
	// Inspect are the destinations among Destinations that the proxy
	// inspects (terminates TLS, checks each request's Host) instead of
	// tunnelling blind; grants issued before it existed omit it, and
	// every destination of theirs is a blind tunnel, as it was.
	Inspect []string `json:"inspect,omitempty"`
}

// Brokered is one credential the grant lets the broker use: its name, the
// one destination the operator bound it to and its form. Never its value.
type Brokered struct {
	Name        string `json:"name"`
	Destination string `json:"destination"`
	// Form is "intercept" for the interception form; empty (as in grants
	// issued before forms existed) is the gateway form.
	Form string `json:"form,omitempty"`
	// Requests are the methods and path prefixes the secret is sent with
	// ("POST /v1/messages"). Grants issued before it existed omit it:
	// they still verify, but a launch re-derives the binding from a
	// policy that now names requests, so they admit no launch.
	Requests []string `json:"requests,omitempty"`
}

// Grant is a verified grant.
type Grant struct {
	// Predicate is the verified predicate.
	Predicate Predicate
	// SubjectName is the statement subject's name, "phase/<name>".
	SubjectName string
	// SubjectDigest is "sha256:<hex>" of Predicate.Phase.
	SubjectDigest string
	// IssuerKeyID is the keys.KeyID of the trusted key that signed the grant.
	IssuerKeyID string
	// EnvelopeDigest is "sha256:<hex>" of the raw envelope bytes verified.
	// It identifies these bytes, not the grant: use Predicate.ID for replay
	// and revocation.
	EnvelopeDigest string
}

// NewID returns a new grant ID: 128 random bits as 32 lowercase hex digits.
func NewID() string { return randid.New(16) }

// ClosureDigest returns the digest of a set of inputs: "sha256:" followed by
// the lowercase hex SHA-256 of their closure manifest. It does not depend on
// the order of entries.
//
// The closure manifest is a published format and must not change. It is the
// concatenation, over the entries sorted by Target, then Source, then Digest
// (each compared bytewise), of
//
//	ns(Target) ns(Source) ns(Digest) "\n"
//
// where ns(s) is the netstring of s: the decimal byte length of s, ":", the
// bytes of s, and ",". For example the single entry {Source: "/src",
// Target: "/in", Digest: "sha256:ab"} has the manifest
//
//	3:/in,4:/src,9:sha256:ab,\n
//
// and no entries have the empty manifest.
func ClosureDigest(entries []Input) string {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Input) int {
		if c := strings.Compare(a.Target, b.Target); c != 0 {
			return c
		}
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return strings.Compare(a.Digest, b.Digest)
	})
	h := sha256.New()
	var buf []byte
	for _, e := range sorted {
		buf = buf[:0]
		for _, s := range [...]string{e.Target, e.Source, e.Digest} {
			buf = strconv.AppendInt(buf, int64(len(s)), 10)
			buf = append(buf, ':')
			buf = append(buf, s...)
			buf = append(buf, ',')
		}
		buf = append(buf, '\n')
		h.Write(buf)
	}
	return digestPrefix + hex.EncodeToString(h.Sum(nil))
}
