package grant

import "fmt"

// Code is the reason a grant was refused. All of custody's grant refusal
// reasons are defined here, including those only callers of [Verifier.Verify]
// can decide (revocation, replay, and launch-time re-derivation).
type Code string

const (
	// CodeMalformed: the envelope or statement is not a well-formed custody
	// grant (too large, not strict JSON, unknown fields, wrong payload or
	// predicate type, invalid predicate fields).
	CodeMalformed Code = "malformed"
	// CodeTampered: a signature that names a trusted key does not verify,
	// or the signed statement contradicts itself (the phase does not hash to
	// the subject digest).
	CodeTampered Code = "tampered"
	// CodeWrongIssuer: no signature is by a trusted issuer key.
	CodeWrongIssuer Code = "wrong-issuer"
	// CodeNotYetValid: the grant's notBefore is in the future.
	CodeNotYetValid Code = "not-yet-valid"
	// CodeExpired: the grant's expiry has passed.
	CodeExpired Code = "expired"

	// CodeRevoked: the grant ID was revoked by the operator.
	CodeRevoked Code = "revoked"
	// CodeReplayed: the grant ID was already used.
	CodeReplayed Code = "replayed"
	// CodeWrongRunner: the grant names another runner identity key.
	CodeWrongRunner Code = "wrong-runner"
	// CodePolicyChanged: the policy file's digest differs from the grant's.
	CodePolicyChanged Code = "policy-changed"
	// CodeRuntimeChanged: the pinned runtime differs from the grant's.
	CodeRuntimeChanged Code = "runtime-changed"
	// CodeImageChanged: the image digest differs from the grant's.
	CodeImageChanged Code = "image-changed"
	// CodeInputsChanged: the input closure differs from the grant's.
	CodeInputsChanged Code = "inputs-changed"
	// CodeTargetMismatch: this host's OS or architecture is not the grant's
	// target.
	CodeTargetMismatch Code = "target-mismatch"
	// CodeNotAdmitted: admission at launch no longer admits what the grant
	// authorizes.
	CodeNotAdmitted Code = "not-admitted"
	// CodeActorNotAllowed: policy does not allow the grant's actor the stage.
	CodeActorNotAllowed Code = "actor-not-allowed"
	// CodeSubmitterNotAllowed: the peer that submitted the grant (its
	// kernel-reported uid and gid) may not submit as the grant's actor.
	CodeSubmitterNotAllowed Code = "submitter-not-allowed"
)

// Error is a refused grant. Callers branch on Code with errors.As. Err,
// when set, is the refusal behind it (an admission refusal with its
// per-requirement diagnostics): it is kept, not flattened, so the client
// still gets every requirement.
type Error struct {
	Code   Code
	Detail string
	Err    error
}

// Error returns "grant refused (<code>): <detail>".
func (e *Error) Error() string {
	return "grant refused (" + string(e.Code) + "): " + e.Detail
}

// Unwrap returns the refusal behind e, if any.
func (e *Error) Unwrap() error { return e.Err }

// RefuseWith returns an *Error with the given code whose detail and cause
// are err.
func RefuseWith(code Code, err error) *Error {
	return &Error{Code: code, Detail: err.Error(), Err: err}
}

// Refuse returns an *Error with the given code and a detail formatted as by
// fmt.Sprintf.
func Refuse(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}
