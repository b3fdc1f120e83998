package evidence_test

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// writeV9Golden writes the frozen receipt/v9 golden once: go test
// ./evidence -run TestGoldenV9 -write-v9-golden.
var writeV9Golden = flag.Bool("write-v9-golden", false, "write the frozen receipt/v9 golden, its keys and fuzz seeds (once; never overwritten)")

// goldenV9 is a receipt of a run on a Kubernetes cluster, signed by
// runner-v9.pub (issuer-v9.pub issued the grant).
const goldenV9 = "receipt-v9.json"

const (
	kubeServer = "https://10.0.0.10:6443"
	kubeCA     = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
	kubeVer    = "v1.37.2"
)

// kubeReceipt is a complete, qualified kube receipt of the fixture's
// run: the grant binds the cluster as its runtime.
func kubeReceipt(t testing.TB) (evidence.Receipt, *fixtureKeys) {
	t.Helper()
	k := &fixtureKeys{runner: newKey(t), issuer: newKey(t)}
	gp := grantPredicate(k.runner.ID())
	gp.Runtime.Version, gp.Runtime.SHA256 = kubeVer, kubeCA
	genv, err := grant.Mint(context.Background(), k.issuer, gp)
	if err != nil {
		t.Fatal(err)
	}
	r := receiptFor(t, k.runner, k.issuer, gp, genv, takeOutputs(t, outputFiles))
	r.Profile.Backend = "kube"
	r.Profile.Runtime = evidence.Runtime{Version: kubeVer, SHA256: kubeCA, Path: kubeServer}
	r.Profile.Identity = &evidence.BackendIdentity{Kind: "kube", Version: kubeVer, Path: kubeServer, SHA256: kubeCA}
	r.Profile.Evidence = map[string]string{"podspec": hexOf([]byte("spec"))}
	r.Profile.UserNamespace = false
	r.Observed = evidence.Observed{At: r.Observed.At, Seccomp: evidence.SeccompUnobserved,
		Notes: []string{"read back from the Kubernetes API server, not from the node"}}
	r.Cleanup = evidence.Cleanup{Verified: true, Steps: []evidence.CleanupStep{
		{Name: "kube-configmap custody-custody-0f1e (uid 11111111-2222-3333-4444-555555555555) gone", OK: true},
		{Name: "kube-pod custody-custody-0f1e (uid 66666666-7777-8888-9999-000000000000) gone", OK: true},
	}}
	r.Kube = &evidence.Kube{
		Cluster:   evidence.KubeCluster{Server: kubeServer, CASHA256: kubeCA, Version: kubeVer},
		Namespace: "custody",
		Pod:       evidence.KubeObject{Name: "custody-custody-0f1e", UID: "66666666-7777-8888-9999-000000000000"},
		Parent:    evidence.KubeObject{Name: "custody-custody-0f1e", UID: "11111111-2222-3333-4444-555555555555"},
		Node:      "node-7", RuntimeClass: "runc", Handler: "runc",
		ImageID:       "registry.example/custody@sha256:" + kubeCA,
		PodSpecSHA256: hexOf([]byte("spec")),
		PodSpec: map[string]string{"runAsNonRoot": "true", "allowPrivilegeEscalation": "false", "readOnlyRootFilesystem": "true",
			"capabilities.drop": "ALL", "seccompProfile": "RuntimeDefault", "automountServiceAccountToken": "false",
			"hostNetwork": "false", "hostPID": "false", "hostIPC": "false", "activeDeadlineSeconds": "120"},
		Container: evidence.KubeContainer{Terminated: true, Reason: "Completed"},
		NetworkPolicy: &evidence.KubeNetworkPolicy{KubeObject: evidence.KubeObject{Name: "custody-custody-0f1e", UID: "abababab-2222-3333-4444-555555555555"},
			SpecSHA256: hexOf([]byte("policy")), Enforcement: "unproved"},
	}
	return r, k
}

type fixtureKeys struct{ runner, issuer *keys.Signer }

// TestGoldenV9 verifies the frozen receipt/v9 golden: authentic,
// promotable, v9's shape naming its cluster, node, RuntimeClass and pod
// spec digest, and within the receipt schema; the earlier goldens keep
// verifying (TestGolden, TestGoldenV8).
func TestGoldenV9(t *testing.T) {
	if *writeV9Golden {
		writeGoldenV9(t)
	}
	tr, err := evidence.LoadTrust(filepath.Join("testdata", "trust.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", goldenV9))
	if err != nil {
		t.Fatal(err)
	}
	env := []byte(strings.TrimSpace(string(b)))
	res := verifyWith(t, tr, env, evidence.WithOutputs(takeOutputs(t, outputFiles)))
	if !res.OK || !res.Promotable {
		t.Fatalf("golden %s:%s", goldenV9, describe(res))
	}
	k := res.Receipt.Kube
	if got := res.Receipt.PredicateType(); got != predicate.ReceiptV9 || k == nil || k.Cluster.Server != kubeServer ||
		k.Node != "node-7" || k.Handler != "runc" || k.PodSpecSHA256 != hexOf([]byte("spec")) {
		t.Fatalf("golden %s decodes as %s with %+v", goldenV9, got, k)
	}
	if err := evidence.CheckReceiptSchema(env); err != nil {
		t.Fatalf("golden %s fails the receipt schema: %v", goldenV9, err)
	}
}

func writeGoldenV9(t *testing.T) {
	for _, name := range []string{goldenV9, "runner-v9.pub", "issuer-v9.pub"} {
		if _, err := os.Stat(filepath.Join("testdata", name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("testdata/%s exists: the receipt/v9 golden is frozen; a new format gets a new version and new goldens", name)
		}
	}
	runner, issuer := newKey(t), newKey(t)
	gp := grantPredicate(runner.ID())
	gp.Runtime.Version, gp.Runtime.SHA256 = kubeVer, kubeCA
	genv, err := grant.Mint(context.Background(), issuer, gp)
	must(t, err)
	r, _ := kubeReceipt(t)
	base := receiptFor(t, runner, issuer, gp, genv, takeOutputs(t, outputFiles))
	r.Runner, r.Grant, r.Output = base.Runner, base.Grant, base.Output
	env := sign(t, runner, r)
	writeGoldenVersion(t, "v9", goldenV9, runner, issuer, env, predicate.ReceiptV9, predicate.ReceiptV8)
	t.Log("wrote the frozen receipt/v9 golden")
}

// TestKubeReceiptUnqualifiedWithoutObservations: a kube receipt whose
// cluster did not report the node (or whose cleanup does not name each
// object's UID) cannot be signed as qualified; signed unqualified, it
// verifies and its effective tier is development. A kube record in a v8
// receipt is refused.
func TestKubeReceiptUnqualifiedWithoutObservations(t *testing.T) {
	r, _ := kubeReceipt(t)
	ctx := context.Background()
	runner := newKey(t)
	r.Runner.ID = runner.ID()
	if _, err := evidence.SignReceipt(ctx, runner, r); err != nil {
		t.Fatalf("a complete kube receipt: %v", err)
	}
	for name, mutate := range map[string]func(*evidence.Receipt){
		"node unobserved": func(r *evidence.Receipt) { r.Kube.Node, r.Kube.Unobserved = "", []string{"node"} },
		"no termination": func(r *evidence.Receipt) {
			r.Kube.Container = evidence.KubeContainer{}
			r.Kube.Unobserved = []string{"container"}
		},
		"cleanup without the pod's uid": func(r *evidence.Receipt) {
			r.Cleanup.Steps = r.Cleanup.Steps[:1]
		},
	} {
		t.Run(name, func(t *testing.T) {
			bad, _ := kubeReceipt(t)
			bad.Runner.ID = runner.ID()
			mutate(&bad)
			_, err := evidence.SignReceipt(ctx, runner, bad)
			if err == nil || !strings.Contains(err.Error(), "profile.unqualified") {
				t.Fatalf("signed as qualified: %v", err)
			}
			bad.Profile.Unqualified = true
			env, err := evidence.SignReceipt(ctx, runner, bad)
			if err != nil {
				t.Fatalf("signed unqualified: %v", err)
			}
			if err := evidence.CheckReceiptSchema(env); err != nil {
				t.Fatal(err)
			}
			var got evidence.Receipt = bad
			if got.EffectiveTier() != evidence.TierDevelopment {
				t.Fatalf("effective tier %s", got.EffectiveTier())
			}
		})
	}
	// A named-unobserved member must be empty.
	lie, _ := kubeReceipt(t)
	lie.Runner.ID = runner.ID()
	lie.Kube.Unobserved, lie.Profile.Unqualified = []string{"node"}, true
	if _, err := evidence.SignReceipt(ctx, runner, lie); err == nil || !strings.Contains(err.Error(), "kube.node") {
		t.Fatalf("a node named unobserved yet recorded: %v", err)
	}
	// profile.runtime must name the cluster the kube record names.
	other, _ := kubeReceipt(t)
	other.Runner.ID = runner.ID()
	other.Profile.Runtime.Path = "https://elsewhere:6443"
	if _, err := evidence.SignReceipt(ctx, runner, other); err == nil || !strings.Contains(err.Error(), "profile.runtime") {
		t.Fatalf("a runtime naming another cluster: %v", err)
	}
}
