package kube_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
	"github.com/custody-dev/custody/backend/kube"
	"github.com/custody-dev/custody/internal/kubetest"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// image is a syntactically pinned reference: nothing is pulled on
// simulated nodes.
const image = "registry.example/custody/busybox@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

const runtimeClass = "runc"

var (
	clusterOnce sync.Once
	shared      *kubetest.Cluster
	sharedStop  func()
)

// cluster is one Cluster A shared by every test in the package: starting
// the control plane dominates the run.
func cluster(t *testing.T) *kubetest.Cluster {
	t.Helper()
	if os.Getenv(kubetest.EnvBin) == "" {
		t.Skipf("SKIPPED, NOT RUN: %s is not set; the Kubernetes tests run under make test-kube", kubetest.EnvBin)
	}
	clusterOnce.Do(func() {
		h := &holder{}
		shared = kubetest.Start(h, kubetest.Options{Nodes: 3, RuntimeClasses: []string{runtimeClass}})
		sharedStop = h.cleanup
	})
	if shared == nil {
		t.Fatal("Cluster A did not start (see the first test's log)")
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedStop != nil {
		sharedStop()
	}
	os.Exit(code)
}

func newBackend(t *testing.T, c *kubetest.Cluster) *kube.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := kube.New(ctx, kube.Config{
		REST: c.Config, Namespace: c.Namespace(), RuntimeClass: runtimeClass, Workspace: "ws1",
		Image: func(backend.Spec) (string, error) { return image, nil },
		QPS:   50, Burst: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func spec(args ...string) backend.Spec {
	return backend.Spec{
		Args: args, Env: []string{"A=1", "PATH=/bin"}, Cwd: "/", UID: 1000, GID: 1000,
		OutputPath: "/out", OutputBytes: 16 << 20, OutputFiles: 100, TmpBytes: 8 << 20,
		Memory: 64 << 20, Pids: 64, CPU: 0.5, FileSize: 8 << 20,
	}
}

// rec is a journal that keeps the last record of each object, identity
// included, as recovery reads it back.
type rec struct {
	mu    sync.Mutex
	order []string
	res   map[string]backend.Resource
	// failCreated, when set, fails the Created record of that kind:
	// custodyd "died" between the create and its record.
	failCreated string
}

func newRec() *rec { return &rec{res: map[string]backend.Resource{}} }

func (r *rec) put(state string, rs []backend.Resource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range rs {
		x.State = state
		x.Identity = maps.Clone(x.Identity)
		r.res[x.Kind+"/"+x.Name] = x
		r.order = append(r.order, state+" "+x.Kind)
	}
}
func (r *rec) Intent(rs ...backend.Resource) error { r.put("intent", rs); return nil }
func (r *rec) Created(rs ...backend.Resource) error {
	for _, x := range rs {
		if x.Kind == r.failCreated {
			return errors.New("journal write failed (simulated crash)")
		}
	}
	r.put("created", rs)
	return nil
}
func (r *rec) Removed(rs ...backend.Resource) error { r.put("removed", rs); return nil }
func (r *rec) recorded() []backend.Resource {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []backend.Resource
	for _, x := range r.res {
		x.Identity = maps.Clone(x.Identity)
		out = append(out, x)
	}
	return out
}

var idN struct {
	sync.Mutex
	n int
}

func newID(prefix string) string {
	idN.Lock()
	defer idN.Unlock()
	idN.n++
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%100000, idN.n)
}

func prepare(t *testing.T, b *kube.Backend, id string, s backend.Spec, r *rec) backend.Sandbox {
	t.Helper()
	intents, err := b.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	r.Intent(intents...)
	sb, err := b.Prepare(context.Background(), id, s, r)
	if err != nil {
		if sb != nil {
			sb.Cleanup(context.Background())
		}
		t.Fatalf("prepare: %v", err)
	}
	return sb
}

func getPod(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s back: %v", name, err)
	}
	return p
}

func annotate(t *testing.T, c kubernetes.Interface, ns, name string, kv map[string]string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
	if _, err := c.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPodCarriesEveryControl: the pod as the API server stored it carries
// every control of the reviewed profile, its reserved labels and its owner;
// the evidence digest is of that read-back spec; the released pod runs
// under its active deadline and ends as the cluster reports.
func TestPodCarriesEveryControl(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c)
	ns, id, r := c.Namespace(), newID("controls"), newRec()
	sb := prepare(t, b, id, spec("/bin/sh", "-c", "exit 3"), r)
	defer func() { wantVerified(t, "cleanup", sb.Cleanup(context.Background())) }()
	name := kube.NamePrefix + id

	p := getPod(t, c.Client, ns, name)
	parent, err := c.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the parent: %v", err)
	}
	ps, ctr := p.Spec, p.Spec.Containers[0]
	sc, csc := ps.SecurityContext, ctr.SecurityContext
	checks := map[string]bool{
		"restartPolicy Never":                     ps.RestartPolicy == corev1.RestartPolicyNever,
		"runtimeClassName from config":            ps.RuntimeClassName != nil && *ps.RuntimeClassName == runtimeClass,
		"image pinned by digest":                  ctr.Image == image,
		"held by the scheduling gate":             len(ps.SchedulingGates) == 1 && ps.SchedulingGates[0].Name == kube.SchedulingGate,
		"no service-account token":                ps.AutomountServiceAccountToken != nil && !*ps.AutomountServiceAccountToken,
		"no service links":                        ps.EnableServiceLinks != nil && !*ps.EnableServiceLinks,
		"no host namespaces":                      !ps.HostNetwork && !ps.HostPID && !ps.HostIPC,
		"pod runAsNonRoot":                        sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot,
		"pod runs as the phase's uid":             sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 1000,
		"pod seccomp RuntimeDefault":              sc != nil && sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"container not privileged":                csc != nil && csc.Privileged != nil && !*csc.Privileged,
		"no privilege escalation":                 csc != nil && csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation,
		"all capabilities dropped":                csc != nil && csc.Capabilities != nil && len(csc.Capabilities.Add) == 0 && len(csc.Capabilities.Drop) == 1 && csc.Capabilities.Drop[0] == "ALL",
		"read-only root filesystem":               csc != nil && csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem,
		"container seccomp RuntimeDefault":        csc != nil && csc.SeccompProfile != nil && csc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"labels: workspace":                       p.Labels[kube.LabelWorkspace] == "ws1",
		"labels: run":                             p.Labels[kube.LabelRun] == id,
		"labels: attempt":                         p.Labels[kube.LabelAttempt] == id,
		"parent labels: run":                      parent.Labels[kube.LabelRun] == id,
		"one owner, the parent, by UID":           len(p.OwnerReferences) == 1 && p.OwnerReferences[0].UID == parent.UID && p.OwnerReferences[0].Kind == "ConfigMap",
		"owner blocks deletion":                   len(p.OwnerReferences) == 1 && p.OwnerReferences[0].BlockOwnerDeletion != nil && *p.OwnerReferences[0].BlockOwnerDeletion,
		"exactly the declared command":            strings.Join(ctr.Command, " ") == "/bin/sh -c exit 3" && len(ctr.Args) == 0,
		"exactly the declared env":                len(ctr.Env) == 2 && ctr.Env[0].Name == "A" && ctr.Env[1].Name == "PATH" && len(ctr.EnvFrom) == 0,
		"requests equal limits":                   len(ctr.Resources.Limits) == 3 && equalResources(ctr.Resources.Requests, ctr.Resources.Limits),
		"memory limit is the budget":              ctr.Resources.Limits.Memory().Value() == 64<<20,
		"cpu limit is the budget":                 ctr.Resources.Limits.Cpu().MilliValue() == 500,
		"Guaranteed QoS":                          p.Status.QOSClass == corev1.PodQOSGuaranteed,
		"no active deadline before Run (unknown)": ps.ActiveDeadlineSeconds == nil,
	}
	var hostPaths, emptyDirs int
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			hostPaths++
		}
		if e := v.EmptyDir; e != nil && e.SizeLimit != nil {
			switch v.Name {
			case "tmp":
				checks["tmp bounded"] = e.SizeLimit.Value() == 8<<20
			case "output":
				checks["output bounded"] = e.SizeLimit.Value() == 16<<20
			}
			emptyDirs++
		}
	}
	checks["no host paths"] = hostPaths == 0
	checks["only the two bounded emptyDirs"] = emptyDirs == 2 && len(ps.Volumes) == 2
	for what, ok := range checks {
		if !ok {
			t.Errorf("read back from the API: %s does not hold", what)
		}
	}
	if _, ok := checks["tmp bounded"]; !ok {
		t.Error("no tmp volume")
	}
	if _, ok := checks["output bounded"]; !ok {
		t.Error("no output volume")
	}
	// The evidence is the digest of the spec the API server stored.
	stored, _ := json.Marshal(p.Spec)
	sum := sha256.Sum256(stored)
	if got := sb.Evidence()["podspec"]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("podspec evidence %s, want the digest of the read-back spec %x", got, sum)
	}
	// The created records came after their intents, each with its UID.
	recd := map[string]string{}
	for _, x := range r.recorded() {
		recd[x.Kind] = x.Identity["uid"]
	}
	// The run's NetworkPolicy: default-deny both ways for this run's pod,
	// owned by the parent, its UID journalled.
	np, err := c.Client.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("network policy: %v", err)
	}
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 ||
		np.Spec.PodSelector.MatchLabels[kube.LabelRun] != p.Labels[kube.LabelRun] || len(np.OwnerReferences) != 1 ||
		np.OwnerReferences[0].UID != parent.UID || recd[kube.KindPolicy] != string(np.UID) {
		t.Errorf("network policy %+v (journal %v), want default-deny for the run's pod, owned by %s", np, recd, parent.UID)
	}
	if recd[kube.KindPod] != string(p.UID) || recd[kube.KindParent] != string(parent.UID) {
		t.Errorf("journal uids %v, want pod %s parent %s", recd, p.UID, parent.UID)
	}
	if o := strings.Join(r.order, ","); !strings.HasPrefix(o, "intent kube-configmap,intent kube-networkpolicy,intent kube-pod,intent kube-configmap,intent kube-networkpolicy,intent kube-pod,created kube-configmap,created kube-networkpolicy,created kube-pod") {
		t.Errorf("journal order %s: each object must be recorded before it is created", o)
	}

	// Released, the pod runs under its deadline and ends as the node says.
	annotate(t, c.Client, ns, name, map[string]string{"kubetest.custody.dev/exit": "3"})
	ex, err := sb.Run(context.Background(), 90*time.Second, backend.IO{})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if ex.CodeUnobserved || ex.Code != 3 || ex.TimedOut || ex.Cancelled {
		t.Errorf("exit %+v, want code 3", ex)
	}
	p = getPod(t, c.Client, ns, name)
	if p.Spec.ActiveDeadlineSeconds == nil || *p.Spec.ActiveDeadlineSeconds != 90 {
		t.Errorf("activeDeadlineSeconds %v, want the wall time 90", p.Spec.ActiveDeadlineSeconds)
	}
	if len(p.Spec.SchedulingGates) != 0 || p.Spec.NodeName == "" {
		t.Errorf("released pod: gates %v node %q", p.Spec.SchedulingGates, p.Spec.NodeName)
	}
	// The placement is what the API server reported, never what was sent:
	// the node the scheduler chose, the handler the RuntimeClass names, the
	// image ID a status reported, the container's end, and the controls and
	// digest of the spec as stored (the released one, deadline included).
	o := ex.Observation
	if o == nil || o.Placement == nil || o.Seccomp != "unobserved" {
		t.Fatalf("observation %+v, want a placement and the node's seccomp unobserved", o)
	}
	pl := o.Placement
	stored, _ = json.Marshal(p.Spec)
	sum = sha256.Sum256(stored)
	if pl.Node != p.Spec.NodeName || pl.Handler != runtimeClass || pl.RuntimeClass != runtimeClass || pl.PodUID != string(p.UID) ||
		pl.ParentUID != string(parent.UID) || pl.ImageID == "" || !pl.Terminated || pl.ExitCode != 3 || pl.DeadlineExceeded ||
		pl.SpecSHA256 != hex.EncodeToString(sum[:]) || pl.NetworkPolicyUID != string(np.UID) || pl.NetworkPolicyProved {
		t.Errorf("placement %+v, want node %s, handler %s, uids %s/%s, an image id, exit 3 and the stored spec's digest", pl, p.Spec.NodeName, runtimeClass, p.UID, parent.UID)
	}
	for k, want := range map[string]string{"activeDeadlineSeconds": "90", "allowPrivilegeEscalation": "false", "readOnlyRootFilesystem": "true",
		"runAsNonRoot": "true", "capabilities.drop": "ALL", "seccompProfile": "RuntimeDefault", "automountServiceAccountToken": "false",
		"hostNetwork": "false", "hostPaths": "", "requestsEqualLimits": "true", "privileged": "false"} {
		if got, ok := pl.Spec[k]; !ok || got != want {
			t.Errorf("placement spec %s = %q (present %v), want %q", k, got, ok, want)
		}
	}
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// TestRefusalsCreateNothing: a Spec that breaks the profile is refused
// before anything is made, naming the requirement; the API server's
// restricted Pod Security also refuses a pod without the controls, so the
// namespace the tests use really enforces it.
func TestRefusalsCreateNothing(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c)
	for name, mut := range map[string]func(*backend.Spec){
		"root":        func(s *backend.Spec) { s.UID = 0 },
		"no memory":   func(s *backend.Spec) { s.Memory = 0 },
		"egress":      func(s *backend.Spec) { s.Egress = &backend.Egress{} },
		"inputs":      func(s *backend.Spec) { s.Inputs = []backend.Mount{{Source: "/x", Target: "/in"}} },
		"output at /": func(s *backend.Spec) { s.OutputPath = "/" },
	} {
		s := spec("/bin/true")
		mut(&s)
		id, r := newID("refused"), newRec()
		sb, err := b.Prepare(context.Background(), id, s, r)
		if !errors.Is(err, kube.ErrRefused) || sb != nil {
			t.Errorf("%s: Prepare %v, want refused before anything is made", name, err)
		}
		if _, err := c.Client.CoreV1().ConfigMaps(c.Namespace()).Get(context.Background(), kube.NamePrefix+id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the parent exists after a refusal: %v", name, err)
		}
	}
	byTag, err := kube.New(context.Background(), kube.Config{REST: c.Config, Namespace: c.Namespace(), RuntimeClass: runtimeClass, Workspace: "ws1",
		Image: func(backend.Spec) (string, error) { return "busybox:latest", nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer byTag.Close()
	if _, err := byTag.Prepare(context.Background(), newID("tag"), spec("/bin/true"), newRec()); !errors.Is(err, kube.ErrRefused) {
		t.Errorf("an image by tag: %v, want refused", err)
	}
	// The legitimate half: the same Spec with every control is admitted
	// (TestPodCarriesEveryControl), and a pod without them is not.
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "privileged-probe", Namespace: c.Namespace()},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: image}}}}
	if _, err := c.Client.CoreV1().Pods(c.Namespace()).Create(context.Background(), bad, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a pod without the restricted controls: %v, want forbidden by Pod Security", err)
	}
}

// TestForeignPodUntouched: a Pod someone else made under custody's name is
// reported foreign, never changed or deleted, by Prepare, Cleanup,
// Recover or VerifyAbsent.
func TestForeignPodUntouched(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c)
	ns, id := c.Namespace(), newID("foreign")
	name := kube.NamePrefix + id
	f := false
	tr := true
	uid := int64(2000)
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"owner": "someone-else"}},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "someone-else/held"}},
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &tr, RunAsUser: &uid, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "x", Image: image, SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: &f, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
	made, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), foreign, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	r := newRec()
	intents, _ := b.Intents(id)
	r.Intent(intents...)
	sb, err := b.Prepare(context.Background(), id, spec("/bin/true"), r)
	var fe *kube.ForeignError
	if !errors.As(err, &fe) || fe.Kind != kube.KindPod || fe.UID != made.UID {
		t.Fatalf("Prepare over a foreign pod: %v, want it reported foreign with its uid %s", err, made.UID)
	}
	if sb == nil {
		t.Fatal("Prepare made the parent and returned no sandbox to clean it up")
	}
	wantVerified(t, "cleanup of what custody made", sb.Cleanup(context.Background()))
	rep := b.Recover(context.Background(), id, r.recorded(), newRec())
	if rep.Verified {
		t.Errorf("recovery over a foreign pod verified: %+v", rep.Steps)
	}
	if !strings.Contains(fmt.Sprint(rep.Steps), "not custody's") {
		t.Errorf("recovery does not report the foreign pod: %+v", rep.Steps)
	}
	found := false
	for _, x := range b.Foreign(func(kind, n string) bool { return false }) {
		found = found || (x.Kind == kube.KindPod && x.Name == name && x.Identity["uid"] == string(made.UID))
	}
	if !found {
		t.Error("Foreign does not list the look-alike pod")
	}
	after := getPod(t, c.Client, ns, name)
	if after.UID != made.UID || after.ResourceVersion != made.ResourceVersion || after.DeletionTimestamp != nil {
		t.Errorf("the foreign pod was touched: uid %s rv %s→%s deleting %v", after.UID, made.ResourceVersion, after.ResourceVersion, after.DeletionTimestamp)
	}
}

// TestCancelDeletesByUID: cancelling a running launch deletes its pod by
// UID and verifies it gone; the exit says cancelled.
func TestCancelDeletesByUID(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c)
	ns, id, r := c.Namespace(), newID("cancel"), newRec()
	sb := prepare(t, b, id, spec("/bin/sh", "-c", "sleep 600"), r)
	name := kube.NamePrefix + id
	uid := getPod(t, c.Client, ns, name).UID
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var ex *backend.Exit
	var err error
	go func() { defer close(done); ex, err = sb.Run(ctx, 5*time.Minute, backend.IO{}) }()
	waitPhase(t, c, ns, name, corev1.PodRunning)
	cancel()
	<-done
	if err != nil || ex == nil || !ex.Cancelled {
		t.Fatalf("exit after cancel %+v %v, want cancelled", ex, err)
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err == nil && p.UID == uid {
		t.Errorf("pod %s (uid %s) still exists after a verified cancel", name, uid)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	wantVerified(t, "cleanup after cancel", sb.Cleanup(context.Background()))
	wantVerified(t, "absence", b.VerifyAbsent(id, r.recorded()))
}

// TestDeadlineExceededSaysTimeout: the cluster ending the pod at its active
// deadline, and custody's own wall clock, both give an exit that says
// timed out.
func TestDeadlineExceededSaysTimeout(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c)
	ns := c.Namespace()
	t.Run("ClusterDeadline", func(t *testing.T) {
		id, r := newID("deadline"), newRec()
		sb := prepare(t, b, id, spec("/bin/sh", "-c", "sleep 600"), r)
		defer func() { wantVerified(t, "cleanup", sb.Cleanup(context.Background())) }()
		annotate(t, c.Client, ns, kube.NamePrefix+id, map[string]string{"kubetest.custody.dev/deadline-exceeded": "true"})
		ex, err := sb.Run(context.Background(), 5*time.Minute, backend.IO{})
		if err != nil || !ex.TimedOut || ex.Cancelled {
			t.Errorf("exit %+v %v, want timed out as the cluster reported", ex, err)
		}
	})
	t.Run("WallClock", func(t *testing.T) {
		id, r := newID("wall"), newRec()
		sb := prepare(t, b, id, spec("/bin/sh", "-c", "sleep 600"), r)
		defer func() { wantVerified(t, "cleanup", sb.Cleanup(context.Background())) }()
		ex, err := sb.Run(context.Background(), 3*time.Second, backend.IO{})
		if err != nil || !ex.TimedOut {
			t.Errorf("exit %+v %v, want timed out", ex, err)
		}
		if _, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), kube.NamePrefix+id, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the timed-out pod: %v, want it deleted", err)
		}
	})
}

// TestRecoverBetweenCreatedAndRecorded: custodyd dies after the pod is
// created but before its UID is journalled; recovery finds it by the
// nonce journalled with the intent and deletes it by UID.
func TestRecoverBetweenCreatedAndRecorded(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c)
	id, r := newID("crash"), newRec()
	r.failCreated = kube.KindPod
	intents, _ := b.Intents(id)
	r.Intent(intents...)
	if _, err := b.Prepare(context.Background(), id, spec("/bin/true"), r); err == nil {
		t.Fatal("Prepare succeeded with a failing journal")
	}
	name := kube.NamePrefix + id
	p := getPod(t, c.Client, c.Namespace(), name)
	wantVerified(t, "recovery", b.Recover(context.Background(), id, r.recorded(), r))
	if got, err := c.Client.CoreV1().Pods(c.Namespace()).Get(context.Background(), name, metav1.GetOptions{}); err == nil && got.UID == p.UID {
		t.Error("the pod is still there after a verified recovery")
	}
	wantVerified(t, "absence", b.VerifyAbsent(id, r.recorded()))
}

func waitPhase(t *testing.T, c *kubetest.Cluster, ns, name string, phase corev1.PodPhase) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == phase {
			return
		}
	}
	t.Fatalf("pod %s never reached %s", name, phase)
}

func wantVerified(t *testing.T, what string, r backend.CleanupReport) {
	t.Helper()
	if !r.Verified {
		t.Errorf("%s not verified: %+v", what, r.Steps)
	}
}

// notYet are the suite's cases that cannot apply on Cluster A yet, and why.
var notYet = map[string]string{
	"Lifecycle":                 "pods return no streams or outputs yet",
	"CancelKillsTree":           "it waits for the workload's output, which pods do not return yet",
	"MemoryBound":               "simulated nodes run nothing: bounds need a real kubelet (Cluster B)",
	"PidsBound":                 "simulated nodes run nothing: bounds need a real kubelet (Cluster B)",
	"OutputBound":               "simulated nodes run nothing: bounds need a real kubelet (Cluster B)",
	"TmpBound":                  "simulated nodes run nothing: bounds need a real kubelet (Cluster B)",
	"RootfsReadOnly":            "simulated nodes run nothing: bounds need a real kubelet (Cluster B)",
	"InputsReadOnly":            "inputs are not delivered to pods yet",
	"EnvExactlyDeclared":        "simulated nodes run nothing, and outputs do not come back yet",
	"UsageReadBack":             "usage is not read back from the node yet",
	"FileSizeBound":             "simulated nodes run nothing: bounds need a real kubelet (Cluster B)",
	"ExitStatus":                "it reads the workload's output, which pods do not return yet",
	"IdentityAndPlace":          "it reads the workload's output, which pods do not return yet",
	"RunTwiceRefused":           "it counts runs in the output, which pods do not return yet",
	"RunWithoutWallTimeRefused": "it counts runs in the output, which pods do not return yet",
	"CleanupIdempotent":         "its run writes output, which pods do not return yet",
	"CapabilityHonesty":         "its cases run shell workloads and read their output",
	"DeniedEgress":              "NetworkPolicy is not made or proved yet (and simulated nodes have no network)",
	"ParallelLaunches":          "its launches write output, which pods do not return yet",
}

// TestSuite runs the backend suite's cases that apply on simulated nodes;
// the rest are skipped by name with the reason (notYet).
func TestSuite(t *testing.T) {
	c := cluster(t)
	b := newBackend(t, c)
	backendtest.Suite(t, func(t *testing.T) backendtest.Fixture {
		name := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
		if why, ok := notYet[name]; ok {
			t.Skipf("NOT APPLICABLE YET on simulated nodes: %s", why)
		}
		return backendtest.Fixture{Backend: b, Spec: func(args ...string) backend.Spec { return spec(args...) }}
	})
}

// holder is a testing.TB for the shared cluster: it outlives any one test,
// so its failures panic (failing the package loudly) and its cleanups run
// from TestMain.
type holder struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

func (h *holder) Helper()                  {}
func (h *holder) Cleanup(f func())         { h.mu.Lock(); h.cleanups = append(h.cleanups, f); h.mu.Unlock() }
func (h *holder) Logf(f string, a ...any)  { fmt.Fprintf(os.Stderr, "cluster: "+f+"\n", a...) }
func (h *holder) Failed() bool             { return h.failed }
func (h *holder) Fatal(a ...any)           { h.Fatalf("%s", fmt.Sprint(a...)) }
func (h *holder) Skipf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (h *holder) Fatalf(f string, a ...any) {
	h.failed = true
	msg := fmt.Sprintf(f, a...)
	h.cleanup()
	panic("Cluster A: " + msg)
}
func (h *holder) cleanup() {
	h.mu.Lock()
	cs := h.cleanups
	h.cleanups = nil
	h.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// docsRole is the Role the how-to gives, read from the page itself.
func docsRole(t *testing.T, ns string) *rbacv1.Role {
	t.Helper()
	page, err := os.ReadFile("../../docs/how-to/kube-backend.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(page), "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if !strings.Contains(body, "kind: Role\n") {
			continue
		}
		var r rbacv1.Role
		if err := yaml.UnmarshalStrict([]byte(body), &r); err != nil {
			t.Fatalf("the Role in the docs: %v", err)
		}
		r.Namespace = ns
		return &r
	}
	t.Fatal("the how-to gives no Role")
	return nil
}

// TestDocsRoleIsExactlyEnough: under the Role the docs give, a launch is
// prepared, run, cleaned up, verified absent and recovered; without any one
// of its verbs the backend fails somewhere in that flow, so the Role is
// exactly what custody needs.
func TestDocsRoleIsExactlyEnough(t *testing.T) {
	c := cluster(t)
	role := docsRole(t, c.Namespace())
	if err := roleFlow(t, c, role); err != nil {
		t.Fatalf("under the docs' Role: %v", err)
	}
	for ri, rule := range role.Rules {
		for vi, verb := range rule.Verbs {
			t.Run(rule.Resources[0]+"-"+verb, func(t *testing.T) {
				less := role.DeepCopy()
				less.Rules[ri].Verbs = append(slices.Clone(rule.Verbs[:vi]), rule.Verbs[vi+1:]...)
				err := roleFlow(t, c, less)
				if err == nil {
					t.Errorf("the flow passed without %s on %s: the docs' Role grants more than custody needs", verb, rule.Resources[0])
				} else {
					t.Logf("without %s on %s: %v", verb, rule.Resources[0], err)
				}
			})
		}
	}
}

// roleFlow binds role to a fresh user and drives one launch through the
// backend as that user; the first failure is returned. What a failed flow
// leaves is removed with the admin client.
func roleFlow(t *testing.T, c *kubetest.Cluster, role *rbacv1.Role) error {
	t.Helper()
	ctx := context.Background()
	role = role.DeepCopy()
	role.Name = newID("custodyd")
	if _, err := c.Client.RbacV1().Roles(c.Namespace()).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := role.Name
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: c.Namespace()},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := c.Client.RbacV1().RoleBindings(c.Namespace()).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := c.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	id, r := newID("rbac"), newRec()
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		c.Client.CoreV1().ConfigMaps(c.Namespace()).Delete(ctx, kube.NamePrefix+id, metav1.DeleteOptions{PropagationPolicy: &bg})
		c.Client.CoreV1().Pods(c.Namespace()).Delete(ctx, kube.NamePrefix+id, metav1.DeleteOptions{})
	})
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	b, err := kube.New(nctx, kube.Config{REST: rc, Namespace: c.Namespace(), RuntimeClass: runtimeClass, Workspace: "ws1",
		Image: func(backend.Spec) (string, error) { return image, nil }})
	if err != nil {
		return fmt.Errorf("starting the backend: %w", err)
	}
	defer b.Close()
	intents, err := b.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	r.Intent(intents...)
	sb, err := b.Prepare(ctx, id, spec("/bin/true"), r)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	if ex, err := sb.Run(rctx, time.Minute, backend.IO{}); err != nil || ex.Code != 0 || ex.CodeUnobserved {
		sb.Cleanup(ctx)
		return fmt.Errorf("run: %+v %w", ex, err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	for what, rep := range map[string]backend.CleanupReport{
		"cleanup": sb.Cleanup(cctx), "absence": b.VerifyAbsent(id, r.recorded()), "recovery": b.Recover(cctx, id, r.recorded(), r),
	} {
		if !rep.Verified {
			return fmt.Errorf("%s not verified: %+v", what, rep.Steps)
		}
	}
	return nil
}
