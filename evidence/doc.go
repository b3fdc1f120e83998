// Package evidence builds, signs and verifies custody's evidence: run
// receipts and promotions.
//
// # Receipts
//
// A receipt is the runner's signed account of one finished phase: which
// grant authorized it, what ran (phase, image, inputs, pinned runtime, host
// profile), what was observed in the live container, how it exited, what it
// used, whether cleanup was verified, and which output files custody kept.
//
// A receipt is a DSSE envelope (https://github.com/secure-systems-lab/dsse)
// with payload type [predicate.PayloadType] whose payload is an in-toto
// Statement v1 (https://in-toto.io/Statement/v1) with predicate type
// [predicate.Receipt] and a [Receipt] as predicate. It is signed by the
// runner identity key; the DSSE keyid is that key's keys.KeyID, which the
// predicate repeats as runner.id.
//
// The statement's subjects are derived from the predicate's output record
// and nothing else (see [Receipt.Subjects]): one subject "out/<path>" per
// retained regular file with its sha256, then "custody:output-tree" with the
// tree digest of the whole retained output (treehash manifest of the
// read-only copy that snapshot.Take stores). A run that produced no output
// tree at all has the single subject "custody:no-output" whose sha256 is that
// of the empty string. Any subject digest is therefore a file or tree whose
// bytes the receipt vouches for, so standard in-toto tooling (for example
// cosign verify-blob-attestation) can check a single output file against a
// receipt.
//
// Like grants, the statement is serialized by encoding/json (struct field
// order, map keys sorted, no insignificant whitespace, no HTML escaping), and
// verification requires exactly that canonical form, byte for byte. Times
// are RFC 3339 in UTC. The grant envelope is embedded verbatim (compact JSON)
// so a verifier can re-check the grant under its own trusted issuer keys.
//
// # Verification
//
// [Verifier.Verify] checks a receipt against a [Trust] file and a [Policy].
// It runs every check and records each in the [Result], so a refusal says
// everything that is wrong at once. Checks that depend on something that
// could not be established (a statement that does not decode, say) fail with
// a reason starting "not evaluated: ". [Result.OK] says the receipt is
// authentic: envelope, signature, issuer-trust, key-revocation, statement,
// grant and (when requested) outputs all pass. [Result.Promotable] adds the
// operator's acceptance rules: freshness, tier, exit-status and cleanup. A
// receipt of a failed run is authentic but not promotable.
//
// The grant check re-verifies the embedded grant under the trust's issuer
// keys as of the run's start (so a grant that expired since still checks)
// and requires the receipt to repeat the grant's bindings exactly: grant id,
// issuer, envelope digest, runner id, phase name, stage and digest, image,
// inputs, runtime version and digest, target OS and architecture, and an
// output within the grant's size bound. The run ID is not bound: a grant
// carries none.
//
// # Pack receipts
//
// A pack receipt is the runner's signed account of one operation on a
// scenario pack: PackUp (what was realized on the engine, by native ID:
// containers with their image IDs and the effective HostConfig read back
// from the engine, networks, volumes, and the open choices the backend
// made) or PackDown (each resource's cleanup result: gone, kept or
// residual, with a reason). It is a [PackReceipt] in the same envelope and
// canonical encoding as a phase receipt, with predicate type
// [predicate.PackReceipt] (v2 for a failed up, v3 when its cleanup lists
// an engine-socket holder's child network or volume), signed by the
// runner identity key, and embeds
// the pack grant verbatim. Its subjects are "compose/<project>" (the
// compose file's bytes) and "plan/<project>" (the admitted plan's, the
// grant's subject), so cosign verify-blob-attestation can check a compose
// file against the [Bundle] of a pack receipt.
//
// [Verifier.VerifyPack] checks it under the same [Trust] as phase
// receipts and a [PackPolicy] (whether to compare a compose file, as of
// when), one named check at a time as [Verifier.Verify]: envelope,
// signature, issuer-trust, key-revocation, statement and grant make it
// authentic (with compose, when the policy gives a compose file to
// compare); freshness, cleanup and outcome make it acceptable. [IsPackReceipt]
// tells the two kinds of receipt apart for dispatch.
//
// # Promotion
//
// [Promote] turns a promotable [Result] into a SLSA Verification Summary
// Attestation (https://slsa.dev/spec/v1.0/verification_summary) over the
// receipt's subjects, signed by the verifier's key.
//
// # Bundles
//
// [Bundle] re-wraps a receipt envelope as a Sigstore bundle v0.3 (public-key
// verification material, no transparency log entries) for Sigstore tooling.
package evidence
