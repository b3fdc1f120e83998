// Package kube is the Kubernetes backend: one launch is one Pod (restart
// policy Never) owned by one per-launch parent ConfigMap, in the operator's
// namespace, under the operator's RuntimeClass and the restricted Pod
// Security level. custodyd stays the authority: every object is journalled
// before it is created, is read, patched and deleted only by its UID with a
// precondition, and a same-named object made by someone else is reported as
// foreign and never touched. Pods are followed through informers, not
// polling, at a bounded client-side request rate.
//
// A bare Pod rather than a Job with backoffLimit 0: the Job controller
// would create the Pod itself, under a generated name, so custody could not
// journal it before it exists, and a Job adds a retry policy a single-use
// grant must never have. With a bare Pod custody creates exactly the object
// it recorded, and the kubelet enforces activeDeadlineSeconds on it.
package kube

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Resource kinds as the journal records them.
const (
	KindParent = "kube-configmap"
	KindPod    = "kube-pod"
	// KindPolicy is the run's default-deny NetworkPolicy.
	KindPolicy = "kube-networkpolicy"
)

// Config is the operator's choice of cluster and profile.
type Config struct {
	// Kubeconfig is the path of the kubeconfig custodyd uses; REST, when
	// set, is used instead.
	Kubeconfig string
	REST       *rest.Config
	// Namespace holds every object custody makes.
	Namespace string
	// RuntimeClass is the RuntimeClass every pod runs under (required).
	RuntimeClass string
	// Workspace is the value of the workspace label.
	Workspace string
	// Image maps a launch's Spec to the image reference it runs, which
	// must be pinned by digest (name@sha256:...).
	Image func(backend.Spec) (string, error)
	// SeccompLocalhost, when set, is custody's own seccomp profile on the
	// nodes (a path under the kubelet's seccomp root); empty means
	// RuntimeDefault. The pod read back records which was applied.
	SeccompLocalhost string
	// QPS and Burst bound the client's API request rate (defaults 20, 40).
	QPS   float32
	Burst int
	// Logger logs what the backend does; nil discards.
	Logger *slog.Logger
	// Faults, when set (fault-injection builds only), is called at each
	// stage boundary: "kube-<kind>-created" falls between an object's
	// creation and its record in the journal.
	Faults func(stage string)
	// CleanupWithin bounds the wait for a deleted object to be verified
	// gone (default 2 minutes).
	CleanupWithin time.Duration
}

// ForeignError says an object with custody's name exists that custody did
// not make (or cannot prove it made): it was left alone.
type ForeignError struct {
	Kind, Namespace, Name string
	UID                   types.UID
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("%s %s/%s (uid %s) has custody's name but is not custody's: left alone; remove or rename it if it is stale", e.Kind, e.Namespace, e.Name, e.UID)
}

// Backend runs launches as pods on one cluster.
type Backend struct {
	cfg      Config
	client   kubernetes.Interface
	host     string
	caSHA256 string
	version  string
	// handler is the RuntimeClass's handler as the cluster names it;
	// empty when custodyd may not read RuntimeClasses.
	handler string
	pods    listerscorev1.PodLister
	parents listerscorev1.ConfigMapLister
	stop    chan struct{}
	log     *slog.Logger

	mu       sync.Mutex
	watchers map[types.UID]chan struct{}
}

var _ backend.Backend = (*Backend)(nil)

// New connects to the cluster, reads its version, and starts the informers
// every launch is followed by. Close stops them.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Namespace == "" || cfg.RuntimeClass == "" || cfg.Workspace == "" || cfg.Image == nil {
		return nil, errors.New("kube backend: the configuration needs a namespace, a RuntimeClass, a workspace and an image resolver")
	}
	if !dnsLabel.MatchString(cfg.Workspace) {
		return nil, fmt.Errorf("kube backend: workspace %q must be a lowercase DNS label to be a label value", cfg.Workspace)
	}
	rc := cfg.REST
	if rc == nil {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("kube backend: kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	}
	rc = rest.CopyConfig(rc)
	if cfg.QPS <= 0 {
		cfg.QPS = 20
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 40
	}
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	rc.UserAgent = "custodyd"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube backend: client: %w", err)
	}
	ca := rc.CAData
	if len(ca) == 0 && rc.CAFile != "" {
		if ca, err = os.ReadFile(rc.CAFile); err != nil {
			return nil, fmt.Errorf("kube backend: cluster CA: %w", err)
		}
	}
	if len(ca) == 0 {
		return nil, errors.New("kube backend: the kubeconfig names no cluster CA: custody identifies a cluster by its API server URL and CA")
	}
	sum := sha256.Sum256(ca)
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("kube backend: API server version at %s: %w", rc.Host, err)
	}
	if err := checkAccess(ctx, client, cfg.Namespace); err != nil {
		return nil, err
	}
	// The handler is cluster-scoped: reading it needs the ClusterRole the
	// how-to gives beside the Role. Without it the handler is unobserved
	// and every receipt says so (and is unqualified).
	handler := ""
	if obj, err := client.NodeV1().RuntimeClasses().Get(ctx, cfg.RuntimeClass, metav1.GetOptions{}); err == nil {
		handler = obj.Handler
	} else if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kube backend: RuntimeClass %q does not exist on the cluster at %s; fix: create it, or name one that exists in kube.runtimeClasses", cfg.RuntimeClass, rc.Host)
	} else if cfg.Logger != nil {
		cfg.Logger.Warn("kube backend: the RuntimeClass's handler cannot be read; receipts will say it is unobserved", "runtimeClass", cfg.RuntimeClass, "err", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		cfg: cfg, client: client, host: rc.Host, caSHA256: hex.EncodeToString(sum[:]), version: v.GitVersion, handler: handler,
		stop: make(chan struct{}), log: log, watchers: map[types.UID]chan struct{}{},
	}
	sel := labels.Set{LabelManagedBy: managedBy, LabelWorkspace: cfg.Workspace}.String()
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	pi, ci := f.Core().V1().Pods(), f.Core().V1().ConfigMaps()
	b.pods, b.parents = pi.Lister(), ci.Lister()
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    b.notify,
		UpdateFunc: func(_, o any) { b.notify(o) },
		DeleteFunc: b.notify,
	}
	for _, inf := range []cache.SharedIndexInformer{pi.Informer(), ci.Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, fmt.Errorf("kube backend: informer: %w", err)
		}
	}
	f.Start(b.stop)
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			close(b.stop)
			return nil, fmt.Errorf("kube backend: the %v informer did not sync: %w", typ, ctx.Err())
		}
	}
	return b, nil
}

// Access is every permission the backend needs, all in its namespace and
// nothing cluster-wide: the Role the docs give.
var Access = []struct {
	Resource string
	Verbs    []string
}{
	{"pods", []string{"create", "get", "list", "watch", "patch", "delete"}},
	{"configmaps", []string{"create", "get", "list", "watch", "delete"}},
	{"networkpolicies", []string{"create", "get", "delete"}},
}

// checkAccess asks the API server whether custodyd's identity holds every
// permission in Access, so that a missing one stops the backend at start
// (naming it) instead of degrading it later: informers, for one, would
// fall back without a word if they could list but not watch.
func checkAccess(ctx context.Context, client kubernetes.Interface, ns string) error {
	var missing []string
	for _, a := range Access {
		for _, verb := range a.Verbs {
			r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: verb, Resource: a.Resource, Group: apiGroup(a.Resource),
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("kube backend: checking access to %s %s: %w", verb, a.Resource, err)
			}
			if !r.Status.Allowed {
				missing = append(missing, verb+" "+a.Resource)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kube backend: the kubeconfig's identity may not %s in namespace %s: bind it to the Role the kube backend's documentation gives", strings.Join(missing, ", "), ns)
	}
	return nil
}

// apiGroup is the API group of a resource in Access.
func apiGroup(resource string) string {
	if resource == "networkpolicies" {
		return "networking.k8s.io"
	}
	return ""
}

// Close stops the informers.
func (b *Backend) Close() { close(b.stop) }

// notify wakes whoever waits on the object's UID.
func (b *Backend) notify(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	m, ok := o.(metav1.Object)
	if !ok {
		return
	}
	b.mu.Lock()
	ch := b.watchers[m.GetUID()]
	b.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// watch returns a channel woken on every event of uid, and its release.
func (b *Backend) watch(uids ...types.UID) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	for _, u := range uids {
		b.watchers[u] = ch
	}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		for _, u := range uids {
			delete(b.watchers, u)
		}
		b.mu.Unlock()
	}
}

// Name is "kube".
func (b *Backend) Name() string { return "kube" }

// Identity names the cluster: the API server's version, its URL and the
// digest of its CA.
func (b *Backend) Identity() backend.Identity {
	return backend.Identity{Kind: "kube", Version: b.version, Path: b.host, SHA256: b.caSHA256}
}

// Capabilities are what this backend can stand behind before the cluster
// is qualified. The production tier needs a passing qualification row of
// the cluster and RuntimeClass, and controls a pod spec cannot express;
// the development tier, which an operator enables in policy and every
// receipt labels unqualified, runs without them. Inputs are not delivered
// to pods, and denied egress is refused until a probe proves the cluster
// enforces NetworkPolicy.
func (b *Backend) Capabilities() backend.Capabilities {
	production := []backend.Gap{
		{Requirement: "kube.qualified", Code: "kube-unqualified",
			Detail: "the cluster and RuntimeClass have no passing qualification row: what the kubelet enforces is not proved",
			Fix:    "qualify the cluster with the kube conformance suite, or ask for the development tier"},
		{Requirement: "sandbox.pids", Code: "kube-no-pod-pids-limit", Detail: "a pod spec cannot set a pids limit; only the node's podPidsLimit bounds it, unproved", Fix: "set podPidsLimit on the nodes and qualify the cluster"},
		{Requirement: "sandbox.file-size", Code: "kube-no-rlimit-fsize", Detail: "a pod spec cannot set RLIMIT_FSIZE", Fix: "run the phase on the oci or vm backend"},
		{Requirement: "sandbox.env-declared-only", Code: "kube-kubelet-env", Detail: "the kubelet adds HOSTNAME and the KUBERNETES_SERVICE_* variables to every container", Fix: "run the phase on another backend"},
	}
	unproved := backend.Gap{Requirement: "egress.networkpolicy", Code: "kube-networkpolicy-unproved",
		Detail: "no probe has proved that this cluster's network plugin enforces NetworkPolicy (each run gets a default-deny one)",
		Fix:    "install a network plugin that enforces NetworkPolicy and qualify the cluster's egress"}
	return backend.Capabilities{
		HostImageOwners: true,
		// An object not verified gone quarantines this cluster alone.
		QuarantineTarget: "kube cluster " + b.host,
		Tiers:            map[string][]backend.Gap{"production": production, "development": nil},
		EgressGaps:       []backend.Gap{unproved},
		DeniedEgressGaps: []backend.Gap{unproved},
		InputGaps: []backend.Gap{{Requirement: "inputs", Code: "kube-no-inputs",
			Detail: "inputs are not delivered to pods yet", Fix: "run phases with inputs on the oci or vm backend"}},
	}
}

// Intents lists the launch's two objects, by name.
func (b *Backend) Intents(id string) ([]backend.Resource, error) {
	name, err := objectName(id)
	if err != nil {
		return nil, err
	}
	ns := map[string]string{"namespace": b.cfg.Namespace}
	return []backend.Resource{
		{Kind: KindParent, Name: name, State: "intent", Identity: ns},
		{Kind: KindPolicy, Name: name, State: "intent", Identity: copyMap(ns)},
		{Kind: KindPod, Name: name, State: "intent", Identity: copyMap(ns)},
	}, nil
}

func copyMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func newNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// Prepare creates the parent and the Pod, held by its scheduling gate, and
// reads the Pod back: the effective spec is what the API server stored, not
// what custody sent.
func (b *Backend) Prepare(ctx context.Context, id string, s backend.Spec, rec backend.Recorder) (backend.Sandbox, error) {
	name, err := objectName(id)
	if err != nil {
		return nil, err
	}
	if err := check(s); err != nil {
		return nil, err
	}
	image, err := b.cfg.Image(s)
	if err != nil {
		return nil, fmt.Errorf("%w: image: %w", ErrRefused, err)
	}
	if !digestRef.MatchString(image) {
		return nil, refuse("image %q is not pinned by digest (name@sha256:<64 hex>)", image)
	}
	out, err := os.MkdirTemp("", "custody-kube-output-")
	if err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	nonce := newNonce()
	sb := &sandbox{b: b, id: id, name: name, nonce: nonce, rec: rec, out: out,
		life: partial.NewLifecycle(statePreparing, moves)}
	ident := map[string]string{"namespace": b.cfg.Namespace, "nonce": nonce}
	if err := rec.Intent(backend.Resource{Kind: KindParent, Name: name, Identity: copyMap(ident)},
		backend.Resource{Kind: KindPolicy, Name: name, Identity: copyMap(ident)},
		backend.Resource{Kind: KindPod, Name: name, Identity: copyMap(ident)}); err != nil {
		return sb, fmt.Errorf("journal intent: %w", err)
	}
	parent := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace, Labels: b.labels(id),
			Annotations: map[string]string{AnnotationNonce: nonce}},
		Data: map[string]string{"run": id},
	}
	got, err := b.client.CoreV1().ConfigMaps(b.cfg.Namespace).Create(ctx, parent, metav1.CreateOptions{})
	if err != nil {
		return sb, b.createErr(ctx, KindParent, name, err)
	}
	sb.parentUID = got.UID
	b.fault(KindParent + "-created")
	if err := rec.Created(b.resource(KindParent, name, nonce, got.UID)); err != nil {
		return sb, fmt.Errorf("journal created: %w", err)
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: got.UID,
		Controller: ptr(true), BlockOwnerDeletion: ptr(true)}
	// The default-deny NetworkPolicy exists before the pod does, read
	// back: whether the cluster enforces it is another matter, which
	// only a probe proves.
	np, err := b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Create(ctx, b.policy(id, name, nonce, owner), metav1.CreateOptions{})
	if err != nil {
		return sb, b.createErr(ctx, KindPolicy, name, err)
	}
	sb.policy = &policyRef{name: name, uid: np.UID}
	b.fault(KindPolicy + "-created")
	if err := rec.Created(b.resource(KindPolicy, name, nonce, np.UID)); err != nil {
		return sb, fmt.Errorf("journal created: %w", err)
	}
	if err := sb.readPolicy(ctx, np.UID); err != nil {
		return sb, err
	}
	pod, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, b.pod(id, name, image, nonce, owner, s), metav1.CreateOptions{})
	if err != nil {
		return sb, b.createErr(ctx, KindPod, name, err)
	}
	sb.podUID = pod.UID
	b.fault(KindPod + "-created")
	if err := rec.Created(b.resource(KindPod, name, nonce, pod.UID)); err != nil {
		return sb, fmt.Errorf("journal created: %w", err)
	}
	if err := sb.readBack(ctx); err != nil {
		return sb, err
	}
	sb.life.Move(opPrepared)
	return sb, nil
}

func ptr[T any](v T) *T { return &v }

func (b *Backend) cleanupWithin() time.Duration {
	if b.cfg.CleanupWithin > 0 {
		return b.cfg.CleanupWithin
	}
	return 2 * time.Minute
}

func (b *Backend) fault(stage string) {
	if b.cfg.Faults != nil {
		b.cfg.Faults(stage)
	}
}

func (b *Backend) resource(kind, name, nonce string, uid types.UID) backend.Resource {
	return backend.Resource{Kind: kind, Name: name, State: "created",
		Identity: map[string]string{"namespace": b.cfg.Namespace, "nonce": nonce, "uid": string(uid)}}
}

// createErr turns a create's AlreadyExists into the foreign object that
// holds the name.
func (b *Backend) createErr(ctx context.Context, kind, name string, err error) error {
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s %s/%s: %w", kind, b.cfg.Namespace, name, err)
	}
	fe := &ForeignError{Kind: kind, Namespace: b.cfg.Namespace, Name: name}
	if m, gerr := b.get(ctx, kind, name); gerr == nil {
		fe.UID = m.GetUID()
	}
	return fe
}

// get reads an object from the API server (not the cache).
func (b *Backend) get(ctx context.Context, kind, name string) (metav1.Object, error) {
	switch kind {
	case KindPod:
		return b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	case KindParent:
		return b.client.CoreV1().ConfigMaps(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	case KindPolicy:
		return b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// list is one page of the namespace's objects of kind.
func (b *Backend) list(ctx context.Context, kind string, opts metav1.ListOptions) ([]metav1.Object, string, error) {
	var out []metav1.Object
	switch kind {
	case KindPod:
		l, err := b.client.CoreV1().Pods(b.cfg.Namespace).List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return out, l.Continue, nil
	case KindParent:
		l, err := b.client.CoreV1().ConfigMaps(b.cfg.Namespace).List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return out, l.Continue, nil
	}
	return nil, "", fmt.Errorf("unknown kind %q", kind)
}

// deleteByUID deletes kind/name only if its UID is uid; propagation is
// foreground, so a parent is gone only once its pod is.
func (b *Backend) deleteByUID(ctx context.Context, kind, name string, uid types.UID) error {
	fg := metav1.DeletePropagationForeground
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &fg}
	var err error
	switch kind {
	case KindPod:
		err = b.client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, opts)
	case KindParent:
		err = b.client.CoreV1().ConfigMaps(b.cfg.Namespace).Delete(ctx, name, opts)
	case KindPolicy:
		err = b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Delete(ctx, name, opts)
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		// The precondition failed: the name is held by another object,
		// so ours is gone; the other is not touched.
		return nil
	}
	return err
}

// gone waits until no object of kind/name has uid, woken by the informers,
// then confirms with a read from the API server.
func (b *Backend) gone(ctx context.Context, kind, name string, uid types.UID, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	wake, release := b.watch(uid)
	defer release()
	// A resync in case an event was coalesced away; the informers, not
	// this timer, carry the ordinary case.
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		m, err := b.get(ctx, kind, name)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err == nil && m.GetUID() != uid:
			return nil
		case err != nil && ctx.Err() == nil:
			b.log.Warn("reading back a deleted object", "kind", kind, "name", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s/%s (uid %s) not verified gone within %s: %w", kind, b.cfg.Namespace, name, uid, within, ctx.Err())
		case <-wake:
		case <-tick.C:
		}
	}
}

// VerifyAbsent checks that none of the launch's recorded objects exists.
func (b *Backend) VerifyAbsent(id string, recorded []backend.Resource) backend.CleanupReport {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := backend.CleanupReport{Verified: true}
	for _, r := range b.ours(recorded) {
		m, err := b.get(ctx, r.Kind, r.Name)
		switch {
		case apierrors.IsNotFound(err):
			partial.Step(&rep, r.Kind+" "+r.Name+" absent", nil)
		case err != nil:
			partial.Step(&rep, r.Kind+" "+r.Name+" absent", err)
		case b.owned(r, m, recorded):
			partial.Step(&rep, r.Kind+" "+r.Name+" absent", fmt.Errorf("it exists (uid %s)", m.GetUID()))
		default:
			partial.Step(&rep, r.Kind+" "+r.Name+" absent", nil)
			rep.Steps[len(rep.Steps)-1].Detail = partial.Detail((&ForeignError{Kind: r.Kind, Namespace: b.cfg.Namespace, Name: r.Name, UID: m.GetUID()}).Error())
		}
	}
	return rep
}

// ours is the recorded resources of this backend.
func (b *Backend) ours(recorded []backend.Resource) []backend.Resource {
	var out []backend.Resource
	for _, r := range recorded {
		if r.Kind == KindParent || r.Kind == KindPod || r.Kind == KindPolicy {
			out = append(out, r)
		}
	}
	return out
}

// owned says whether m is the object r records: by its UID when one was
// recorded; otherwise (killed between create and record) by the nonce
// journalled with the intent, or, for the pod, by its owner being the
// recorded parent.
func (b *Backend) owned(r backend.Resource, m metav1.Object, recorded []backend.Resource) bool {
	if uid := r.Identity["uid"]; uid != "" {
		return string(m.GetUID()) == uid
	}
	if n := r.Identity["nonce"]; n != "" && m.GetAnnotations()[AnnotationNonce] == n {
		return true
	}
	if r.Kind == KindPod || r.Kind == KindPolicy {
		for _, p := range recorded {
			if p.Kind == KindParent && p.Name == r.Name && p.Identity["uid"] != "" {
				for _, o := range m.GetOwnerReferences() {
					if string(o.UID) == p.Identity["uid"] && o.Kind == "ConfigMap" {
						return true
					}
				}
			}
		}
	}
	return false
}

// Recover deletes what the journal and the cluster agree is this launch's
// (by UID, nonce or owner), verifies it gone, and leaves a look-alike
// alone, reporting it.
func (b *Backend) Recover(ctx context.Context, id string, recorded []backend.Resource, rec backend.Recorder) backend.CleanupReport {
	rep := backend.CleanupReport{Verified: true}
	// The parent first: foreground deletion takes the pod with it.
	for _, kind := range []string{KindParent, KindPolicy, KindPod} {
		for _, r := range b.ours(recorded) {
			if r.Kind != kind {
				continue
			}
			step := "recover " + r.Kind + " " + r.Name
			m, err := b.get(ctx, r.Kind, r.Name)
			if apierrors.IsNotFound(err) {
				// Never made, or already gone: either way the journal's
				// record of it is closed, or the attempt stays open.
				partial.Step(&rep, step, rec.Removed(r))
				continue
			}
			if err != nil {
				partial.Step(&rep, step, err)
				continue
			}
			if !b.owned(r, m, recorded) {
				partial.Step(&rep, step, &ForeignError{Kind: r.Kind, Namespace: b.cfg.Namespace, Name: r.Name, UID: m.GetUID()})
				continue
			}
			err = b.deleteByUID(ctx, r.Kind, r.Name, m.GetUID())
			if err == nil {
				err = b.gone(ctx, r.Kind, r.Name, m.GetUID(), b.cleanupWithin())
			}
			if err == nil {
				err = rec.Removed(r)
			}
			partial.Step(&rep, step, err)
		}
	}
	return rep
}

// Foreign lists the objects in the namespace that carry custody's naming
// and that known does not hold.
func (b *Backend) Foreign(known func(kind, name string) bool) []backend.Resource {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []backend.Resource
	add := func(kind string, m metav1.Object) {
		if len(m.GetName()) > len(NamePrefix) && m.GetName()[:len(NamePrefix)] == NamePrefix && !known(kind, m.GetName()) {
			out = append(out, backend.Resource{Kind: kind, Name: m.GetName(), State: "created",
				Identity: map[string]string{"namespace": m.GetNamespace(), "uid": string(m.GetUID())}})
		}
	}
	for _, kind := range []string{KindPod, KindParent} {
		opts := metav1.ListOptions{Limit: 500}
		for {
			items, next, err := b.list(ctx, kind, opts)
			if err != nil {
				b.log.Warn("listing for look-alikes", "kind", kind, "err", err)
				break
			}
			for _, m := range items {
				add(kind, m)
			}
			if opts.Continue = next; next == "" {
				break
			}
		}
	}
	return out
}
