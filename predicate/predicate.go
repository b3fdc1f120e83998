// Package predicate names custody's own in-toto predicate types.
//
// Every custody attestation is an in-toto Statement v1
// (https://in-toto.io/Statement/v1) carried in a DSSE envelope whose payload
// type is [PayloadType]. The statement's predicateType says what the
// statement is. All of custody's predicate types live under the single URI
// [Prefix] and carry their major version as the last path element; a
// predicate whose meaning changes gets a new version, never a reused URI.
package predicate

// Prefix is the URI prefix shared by every custody predicate type.
const Prefix = "https://custody.dev/attestation/"

const (
	// Grant is the predicate type of an operator grant: a single-use,
	// scoped authorization to run one phase, signed by the grant issuer.
	Grant = Prefix + "grant/v1"
	// Receipt is the predicate type of the receipts custody signs now:
	// ReceiptV3.
	Receipt = ReceiptV3
	// ReceiptV1 is the first receipt predicate: a runner's receipt of a
	// finished phase, signed by the runner identity key. Receipts of this
	// type keep verifying.
	ReceiptV1 = Prefix + "receipt/v1"
	// ReceiptV2 is ReceiptV1 plus the backend that ran the phase
	// (profile.backend; profile.configSha256 is then required only of the
	// oci backend) and the digests of the workload's standard streams as
	// the runner spooled them (streams).
	ReceiptV2 = Prefix + "receipt/v2"
	// ReceiptV3 is ReceiptV2 with the profile recording what ran as the
	// backend reports it: its identity (profile.identity: kind, version,
	// path, sha256) and its evidence map (profile.evidence: name to
	// lowercase hex SHA-256, the backend's sandbox evidence exactly). The
	// flat profile.configSha256, gateSha256 and seccompSha256 of v1 and v2
	// are not written; for the oci backend they are the evidence map's
	// "config", "gate" and "seccomp", which an oci v3 receipt must carry.
	ReceiptV3 = Prefix + "receipt/v3"
	// ReceiptV4 is ReceiptV3 with the run's restricted egress (egress: the
	// destinations it had and every decision its proxy and broker made).
	// Custody signs it for a run that had restricted egress, and v3 for
	// every other run, whose shape is unchanged; no earlier version may
	// carry egress.
	ReceiptV4 = Prefix + "receipt/v4"
	// ReceiptV5 is ReceiptV4 with the warm pool (pooled: the pool
	// profile, the pooled sandbox and when it was prepared, before its
	// grant existed) and egress optional. Custody signs it for a run that
	// took a pooled sandbox; no earlier version may carry pooled.
	ReceiptV5 = Prefix + "receipt/v5"
	// ReceiptV6 is ReceiptV4 with an egress record that a workload cannot
	// flood: egress.decisions holds every allowed decision (a run's proxy
	// refuses a connection it could no longer record) and a sample of the
	// refusals (the first and the last), egress.refused counts every
	// refusal by destination and code, egress.inspected names the
	// destinations whose requests' Host was checked (every other allowed
	// tunnel is blind), and each brokered credential names the requests
	// it was sent with (requests); egress.dropped is not written. Custody
	// signs it for a run with restricted egress; v4 receipts keep
	// verifying with their meaning (decisions a prefix of all, the rest
	// counted in dropped).
	ReceiptV6 = Prefix + "receipt/v6"
	// ReceiptV7 is ReceiptV6 with pooled and egress optional (egress, when
	// present, has v6's shape) and unobserved: the names of the exit and
	// usage members the run did not observe (exit.code,
	// usage.peakMemoryBytes, usage.cpuTimeMillis, usage.wallMillis,
	// usage.oomKills), sorted, each written as -1, which no observation
	// has. Custody signs it for a run with such a member (one that failed
	// after its workload started, before the sandbox reported how it
	// ended); no earlier version may carry unobserved or a negative usage.
	ReceiptV7 = Prefix + "receipt/v7"
	// ReceiptV8 is ReceiptV7 with authorization: the standing
	// authorization the run's grant was minted under (name) and the
	// digest of the policy that held it (policyDigest); unobserved is
	// optional. Custody signs it for every run whose grant it minted under
	// an authorization, and no earlier version may carry authorization.
	ReceiptV8 = Prefix + "receipt/v8"
	// ReceiptV9 is ReceiptV8 with kube: what a Kubernetes cluster's API
	// server reported of a run on the kube backend, read back after the
	// fact (the cluster's URL and CA digest, the node, the RuntimeClass and
	// its handler, the image ID, the effective pod spec's digest and its
	// reviewed controls, how the container ended, the run's NetworkPolicy,
	// and the members it did not report); authorization is optional, and
	// profile.runtime and profile.identity name the cluster. A kube record
	// that is incomplete makes the receipt unqualified in any tier.
	// Custody signs it for every run on the kube backend, and no earlier
	// version may carry kube.
	ReceiptV9 = Prefix + "receipt/v9"
	// PackGrant is the predicate type of an operator's pack grant: a
	// single-use, scoped authorization to bring one admitted pack (a
	// compose file and its plan) up on one runner against one engine,
	// signed by the grant issuer.
	PackGrant = Prefix + "pack-grant/v1"
	// PackReceipt is the predicate type of a runner's receipt of one pack
	// operation (up or down): what was realized on the engine by native ID,
	// or what teardown left, signed by the runner identity key.
	PackReceipt = Prefix + "pack-receipt/v1"
	// PackReceiptV2 is the receipt of an up that failed (operation
	// up-failed): why it failed, and what the teardown of its attempt did
	// to each resource it made. It adds that operation and its failure
	// field to PackReceipt, whose up and down receipts keep v1.
	PackReceiptV2 = Prefix + "pack-receipt/v2"
	// PackReceiptV3 is PackReceiptV2 whose cleanup may also list what an
	// engine-socket holder of the workspace made besides containers:
	// resources of kind child-network and child-volume, each with what
	// was done to it. Custody signs it for a down or up-failed receipt
	// that lists such a child; no earlier version may carry those kinds.
	PackReceiptV3 = Prefix + "pack-receipt/v3"
	// PipelineSummary is the predicate type of a runner's summary of a
	// pipeline run: every stage's receipt by digest, with its input and
	// output digests, the links between stages checked before signing,
	// signed by the runner identity key. It lives under Prefix like every
	// custody predicate type.
	PipelineSummary = Prefix + "pipeline-summary/v1"
	// Qualification is reserved for a statement that a host qualified for a
	// tier. Nothing produces or accepts it yet.
	Qualification = Prefix + "qualification/v1"
)

// PayloadType is the DSSE payload type of an in-toto statement.
const PayloadType = "application/vnd.in-toto+json"
