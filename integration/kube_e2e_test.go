package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/kubetest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/predicate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startKubeDaemon starts Cluster A (kwok nodes; skipped, loudly, outside
// make test-kube) and custodyd with the kube backend configured on it.
func startKubeDaemon(t *testing.T) (*env, *kubetest.Cluster) {
	t.Helper()
	c := kubetest.Start(t, kubetest.Options{Nodes: 2, RuntimeClasses: []string{"runc"}})
	cfg := fmt.Sprintf("backends: [oci, kube]\nkube: {kubeconfig: %s, namespace: %s, runtimeClasses: [runc], imageRepository: registry.example/custody, qps: 50, burst: 100}\n",
		c.Kubeconfig, c.Namespace())
	return startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{Config: cfg}), c
}

// kubePhase writes a development-tier phase on backend kube, as uid
// 1000 (the restricted Pod Security level runs no root), running command
// (a JSON list); extra is more YAML.
func (e *env) kubePhase(t *testing.T, name, command, extra string) string {
	t.Helper()
	p := e.phase(t, name, "true", "backend: kube\nuser: \"1000:1000\"\n"+extra)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(b), `command: ["/bin/sh", "-c", "true"]`, "command: "+command, 1)
	doc = strings.Replace(doc, "wallTime: 20s", "wallTime: 60s", 1)
	if !strings.Contains(doc, "command: "+command) || !strings.Contains(doc, "wallTime: 60s") {
		t.Fatalf("phase template changed:\n%s", doc)
	}
	write(t, p, doc)
	return p
}

// TestKubePhaseThroughCustodyd: a phase whose plan says backend kube runs
// through custodyd onto Cluster A and back (kwok completes the pod), with
// a receipt v9 that verifies and names the cluster (its API server and CA
// digest), the node, the RuntimeClass and its handler, the image ID, the
// digest and controls of the pod spec read back, the container's end and
// each object's removal by UID; both objects are gone from the cluster.
// The receipt is development tier, so unqualified.
func TestKubePhaseThroughCustodyd(t *testing.T) {
	e, c := startKubeDaemon(t)
	trust := e.trust(t, "trust-dev.yaml", "development")
	phase := e.kubePhase(t, "onkube", `["/bin/true"]`, "")
	if code, out, errs := e.custody("admit", phase); code != exitOK {
		t.Fatalf("admit: %d\n%s\n%s", code, out, errs)
	}
	g := e.grant(t, phase)
	out := filepath.Join(e.dir, "kubeout")
	receipt := filepath.Join(out, "receipt.json")
	code, stdout, errs := e.custody("run", "--grant", g, "--json", "--receipt", receipt)
	if code != exitOK {
		t.Fatalf("run: %d %s %s", code, stdout, errs)
	}
	var res struct{ Status string }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Status != "ok" {
		t.Fatalf("result %s: %v", stdout, err)
	}
	code, vout, verrs := e.custody("verify", receipt, "--trust", trust, "--outputs", filepath.Join(out, "outputs"))
	if code != verifyPromotable {
		t.Fatalf("verify: %d\n%s%s", code, vout, verrs)
	}
	ptype, r := receiptStatement(t, receipt)
	k := r.Kube
	if ptype != predicate.ReceiptV9 || k == nil || r.Profile.Backend != "kube" || !r.Profile.Unqualified {
		t.Fatalf("receipt %s backend %s unqualified %v kube %v", ptype, r.Profile.Backend, r.Profile.Unqualified, k)
	}
	if k.Cluster.Server != c.Config.Host || len(k.Cluster.CASHA256) != 64 || k.Namespace != c.Namespace() ||
		!strings.HasPrefix(k.Node, "kwok-node-") || k.RuntimeClass != "runc" || k.Handler != "runc" || k.ImageID == "" ||
		len(k.PodSpecSHA256) != 64 || !k.Container.Terminated || k.Container.ExitCode != 0 || len(k.Unobserved) != 0 {
		t.Fatalf("kube record %+v", k)
	}
	// The run's default-deny NetworkPolicy was made, read back and
	// removed; its enforcement is not proved on this cluster.
	if np := k.NetworkPolicy; np == nil || np.Enforcement != "unproved" || np.UID == "" || len(np.SpecSHA256) != 64 {
		t.Errorf("network policy %+v, want one read back with enforcement unproved", k.NetworkPolicy)
	}
	for key, want := range map[string]string{"runAsNonRoot": "true", "runAsUser": "1000", "allowPrivilegeEscalation": "false",
		"readOnlyRootFilesystem": "true", "capabilities.drop": "ALL", "automountServiceAccountToken": "false", "activeDeadlineSeconds": "60",
		"image": "registry.example/custody@" + e.image} {
		if k.PodSpec[key] != want {
			t.Errorf("pod spec %s = %q, want %q", key, k.PodSpec[key], want)
		}
	}
	for _, uid := range []string{k.Pod.UID, k.Parent.UID} {
		found := false
		for _, s := range r.Cleanup.Steps {
			found = found || (s.OK && strings.Contains(s.Name, "(uid "+uid+")"))
		}
		if !found || !r.Cleanup.Verified {
			t.Errorf("cleanup %+v does not verify uid %s gone", r.Cleanup, uid)
		}
	}
	ctx := context.Background()
	if p, err := c.Client.CoreV1().Pods(c.Namespace()).Get(ctx, k.Pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s after the run: %v %v", k.Pod.Name, p.UID, err)
	}
	if m, err := c.Client.CoreV1().ConfigMaps(c.Namespace()).Get(ctx, k.Parent.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("parent %s after the run: %v %v", k.Parent.Name, m.UID, err)
	}
	t.Logf("verify:\n%s", vout)
}

// TestKubeDeniedEgressRefusedUnproved: on a cluster whose NetworkPolicy
// enforcement no probe has proved (Cluster A has no network plugin), a
// phase that asks for denied egress, or for restricted egress, is refused
// at admission naming the gap, and no grant is issued for it; no object
// is made on the cluster. A phase that asks for no network still runs
// (TestKubePhaseThroughCustodyd).
func TestKubeDeniedEgressRefusedUnproved(t *testing.T) {
	e, c := startKubeDaemon(t)
	for name, extra := range map[string]string{"deny": "network: deny\n", "egress": "network: {egress: [\"example.com:443\"]}\n"} {
		phase := e.kubePhase(t, "net-"+name, `["/bin/true"]`, extra)
		code, out, errs := e.custody("admit", phase)
		if code != exitRefused || !strings.Contains(out+errs, "unsupported") || !strings.Contains(out+errs, "no probe has proved that this cluster's network plugin enforces NetworkPolicy") {
			t.Errorf("admit %s: %d\n%s\n%s", name, code, out, errs)
		}
		if code, out, errs := e.custody("grant", "issue", phase, "--actor", "ci-bot", "--ttl", "5m"); code == 0 {
			t.Errorf("grant issued for a %s phase: %s %s", name, out, errs)
		}
	}
	// A phase with inputs is refused the same way.
	in := e.kubePhase(t, "inputs", `["/bin/true"]`, "inputs:\n- {source: "+e.dir+", target: /src}\n")
	if code, out, errs := e.custody("admit", in); code != exitRefused || !strings.Contains(out+errs, "inputs are not delivered to pods") {
		t.Errorf("admit with inputs: %d\n%s\n%s", code, out, errs)
	}
	ctx := context.Background()
	pods, err := c.Client.CoreV1().Pods(c.Namespace()).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := c.Client.CoreV1().ConfigMaps(c.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: "custody.dev/managed-by"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 || len(cms.Items) != 0 {
		t.Errorf("refused phases left %d pods and %d parents on the cluster", len(pods.Items), len(cms.Items))
	}
}

// TestKubeRecoveryAfterSIGKILL: custodyd (the fault-injection build) is
// killed between creating each of a run's objects on the cluster and
// recording it in the journal; the restarted daemon recovers the attempt
// before it serves: every object the run made (matched by the nonce
// journalled with its intent, or by its owner) is deleted and verified
// gone, the attempt is clean and the runner is not quarantined.
func TestKubeRecoveryAfterSIGKILL(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{RuntimeClasses: []string{"runc"}})
	cfg := fmt.Sprintf("backends: [oci, kube]\nkube: {kubeconfig: %s, namespace: %s, runtimeClasses: [runc], imageRepository: registry.example/custody}\n",
		c.Kubeconfig, c.Namespace())
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{Config: cfg, Fault: true})
	ctx := context.Background()
	ns, sel := c.Namespace(), metav1.ListOptions{LabelSelector: "custody.dev/managed-by=custody"}
	left := func() int {
		pods, err1 := c.Client.CoreV1().Pods(ns).List(ctx, sel)
		cms, err2 := c.Client.CoreV1().ConfigMaps(ns).List(ctx, sel)
		nps, err3 := c.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatal(err1, err2, err3)
		}
		return len(pods.Items) + len(cms.Items) + len(nps.Items)
	}
	for i, stage := range []string{"kube-configmap-created", "kube-networkpolicy-created", "kube-pod-created"} {
		t.Run(stage, func(t *testing.T) {
			g := e.grant(t, e.kubePhase(t, fmt.Sprintf("crash%d", i), `["/bin/true"]`, ""))
			e.d.Stop()
			e.d.Start("CUSTODY_FAULT=" + stage)
			if code, out, errs := e.custody("run", "--grant", g); code == exitOK {
				t.Fatalf("the run completed although custodyd should have died at %s: %s %s", stage, out, errs)
			}
			if ps := e.d.Exited(20 * time.Second); ps == nil {
				t.Fatalf("custodyd did not die at %s", stage)
			}
			if n := left(); n != i+1 {
				t.Fatalf("%d custody objects on the cluster after a kill at %s, want %d", n, stage, i+1)
			}
			e.d.Start()
			if n := left(); n != 0 {
				t.Fatalf("%d custody objects left after recovery from a kill at %s\n%s", n, stage, e.d.Logs.String())
			}
			q, err := e.d.Control.Quarantine(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if q.Quarantined {
				t.Fatalf("quarantined after recovery from %s: %+v", stage, q)
			}
		})
	}
}

// TestKubeUnverifiedCleanupQuarantinesTheCluster: a pod that cannot be
// verified gone (a finalizer holds it) quarantines that cluster target,
// not the runner: kube phases are refused naming the cluster, while an oci
// phase still runs; the operator's release lifts it.
func TestKubeUnverifiedCleanupQuarantinesTheCluster(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{RuntimeClasses: []string{"runc"}})
	cfg := fmt.Sprintf("backends: [oci, kube]\nkube: {kubeconfig: %s, namespace: %s, runtimeClasses: [runc], imageRepository: registry.example/custody, cleanupWithin: 3s}\n",
		c.Kubeconfig, c.Namespace())
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{Config: cfg})
	ctx := context.Background()
	ns := c.Namespace()
	phase := e.kubePhase(t, "held", `["/bin/sleep", "600"]`, "")
	doc, err := os.ReadFile(phase)
	if err != nil {
		t.Fatal(err)
	}
	write(t, phase, strings.Replace(string(doc), "wallTime: 60s", "wallTime: 8s", 1))
	g := e.grant(t, phase)
	done := make(chan string, 1)
	go func() {
		code, out, errs := e.custody("run", "--grant", g)
		done <- fmt.Sprintf("%d %s %s", code, out, errs)
	}()
	// Hold the pod with a finalizer once it runs; release it at the end.
	var held string
	for deadline := time.Now().Add(30 * time.Second); held == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no custody pod started")
		}
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "custody.dev/managed-by=custody"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if len(p.Spec.SchedulingGates) == 0 {
				patch := []byte(`{"metadata":{"finalizers":["kubetest.custody.dev/hold"]}}`)
				if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, p.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
				held = p.Name
			}
		}
	}
	t.Cleanup(func() {
		c.Client.CoreV1().Pods(ns).Patch(ctx, held, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	var ran string
	select {
	case ran = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the run did not end")
	}
	if strings.HasPrefix(ran, "0 ") || !strings.Contains(ran, "kube cluster") {
		t.Fatalf("run with a held pod: %s", ran)
	}
	q, err := e.d.Control.Quarantine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q.Quarantined {
		t.Fatalf("the runner is quarantined, not the cluster: %+v", q)
	}
	again := e.kubePhase(t, "after", `["/bin/true"]`, "")
	if code, out, errs := e.custody("admit", again); code == exitOK || !strings.Contains(out+errs, "quarantined") || !strings.Contains(out+errs, "kube cluster "+c.Config.Host) {
		t.Fatalf("a kube phase on the quarantined cluster: %d %s %s", code, out, errs)
	}
	oci := e.phase(t, "still", "echo ok > /out/ok", "")
	if code, out, errs := e.custody("run", "--grant", e.grant(t, oci)); code != exitOK {
		t.Fatalf("an oci phase while the cluster is quarantined: %d %s %s", code, out, errs)
	}
	// The release is refused while the held pod remains; once the
	// operator lets it go, recovery verifies it gone and the release lifts
	// the cluster's quarantine.
	if code, out, errs := e.custody("quarantine", "release"); code == 0 || !strings.Contains(out+errs, "not verified gone") {
		t.Fatalf("release with the pod still held: %d %s %s", code, out, errs)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, held, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custody("recover"); code != 0 {
		t.Fatalf("recover: %d %s %s", code, out, errs)
	}
	if code, out, errs := e.custody("quarantine", "release"); code != 0 {
		t.Fatalf("release: %d %s %s", code, out, errs)
	}
	if code, out, errs := e.custody("admit", again); code != exitOK {
		t.Fatalf("a kube phase after the release: %d %s %s", code, out, errs)
	}
}
