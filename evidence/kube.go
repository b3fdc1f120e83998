package evidence

import (
	"maps"
	"net/url"
	"slices"
	"strings"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/predicate"
)

// Kube is what a receipt v9 records of a run on a Kubernetes cluster, as
// the cluster's API server reported it after the fact: never what custody
// sent. A value the cluster did not report is named in Unobserved (and is
// empty), and such a receipt is unqualified whatever its tier.
type Kube struct {
	// Cluster is the cluster's identity: its API server URL, the digest
	// of the CA custodyd trusts for it, and the version it reported.
	Cluster KubeCluster `json:"cluster"`
	// Namespace holds every object of the run.
	Namespace string `json:"namespace"`
	// Pod and Parent are the run's two objects, by name and UID.
	Pod    KubeObject `json:"pod"`
	Parent KubeObject `json:"parent"`
	// Node is the node the pod was bound to.
	Node string `json:"node"`
	// RuntimeClass is the pod's RuntimeClass as read back, and Handler
	// the handler that RuntimeClass names on the cluster.
	RuntimeClass string `json:"runtimeClass"`
	Handler      string `json:"handler"`
	// ImageID is the container's image ID as its status reports it.
	ImageID string `json:"imageId"`
	// PodSpecSHA256 is the lowercase hex SHA-256 of the pod spec read back
	// from the API server after it was created (its JSON encoding), and
	// PodSpec the controls in it a reviewer checks, by name (KubePodSpecKeys).
	PodSpecSHA256 string            `json:"podSpecSha256"`
	PodSpec       map[string]string `json:"podSpec"`
	// Container is how the container ended, as its status says.
	Container KubeContainer `json:"container"`
	// NetworkPolicy is the run's default-deny NetworkPolicy, read back,
	// and whether the cluster's enforcement of it was proved.
	NetworkPolicy *KubeNetworkPolicy `json:"networkPolicy,omitempty"`
	// Unobserved names the members above the cluster did not report,
	// sorted (KubeUnobservable); absent when it reported them all.
	Unobserved []string `json:"unobserved,omitempty"`
}

// KubeCluster identifies a cluster.
type KubeCluster struct {
	Server   string `json:"server"`
	CASHA256 string `json:"caSha256"`
	Version  string `json:"version"`
}

// KubeObject is one object by name and UID.
type KubeObject struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// KubeContainer is a container's end as the pod's status reports it.
type KubeContainer struct {
	// Terminated says the status reported the container terminated; the
	// rest is meaningful only then.
	Terminated       bool   `json:"terminated"`
	ExitCode         int    `json:"exitCode"`
	Reason           string `json:"reason"`
	OOMKilled        bool   `json:"oomKilled"`
	DeadlineExceeded bool   `json:"deadlineExceeded"`
}

// KubeNetworkPolicy is a run's NetworkPolicy as read back.
type KubeNetworkPolicy struct {
	KubeObject
	// SpecSHA256 is the SHA-256 of its spec's JSON encoding, read back.
	SpecSHA256 string `json:"specSha256"`
	// Enforcement is "proved" (a qualification probe showed the cluster
	// enforces it) or "unproved".
	Enforcement string `json:"enforcement"`
}

// KubePodSpecKeys are the controls a v9 receipt's kube.podSpec may name.
var KubePodSpecKeys = []string{
	"activeDeadlineSeconds", "allowPrivilegeEscalation", "automountServiceAccountToken", "capabilities.drop",
	"hostIPC", "hostNetwork", "hostPID", "hostPaths", "image", "limits.cpu", "limits.ephemeral-storage", "limits.memory",
	"privileged", "readOnlyRootFilesystem", "requestsEqualLimits", "restartPolicy", "runAsGroup", "runAsNonRoot",
	"runAsUser", "seccompProfile", "volumes",
}

// KubeUnobservable are the kube members a receipt may name unobserved.
var KubeUnobservable = []string{"container", "handler", "imageId", "node", "podSpec"}

var kubeEnforcement = []string{"proved", "unproved"}

// KubeQualified says whether what the cluster reported is complete: every
// observation made, the container seen terminated, and each object's
// removal verified by its UID. A receipt whose kube record is not
// complete is unqualified (profile.unqualified).
func KubeQualified(k *Kube, c *Cleanup) bool {
	return len(k.Unobserved) == 0 && k.Container.Terminated && k.Namespace != "" && k.RuntimeClass != "" && kubeCleanupByUID(k, c)
}

// kubeCleanupByUID says cleanup was verified and names each object's UID
// in a passed step.
func kubeCleanupByUID(k *Kube, c *Cleanup) bool {
	if !c.Verified || k.Pod.UID == "" || k.Parent.UID == "" {
		return false
	}
	for _, uid := range []string{k.Pod.UID, k.Parent.UID} {
		found := false
		for _, s := range c.Steps {
			found = found || (s.OK && strings.Contains(s.Name, "(uid "+uid+")"))
		}
		if !found {
			return false
		}
	}
	return true
}

// checkKube checks that kube is present exactly in v9, on backend kube,
// well formed, with the cluster's identity agreeing with the profile's,
// and that a receipt whose kube record is incomplete is unqualified.
func checkKube(ps *problems, r *Receipt, predicateType string) {
	k := r.Kube
	switch {
	case predicateType != predicate.ReceiptV9 && k != nil:
		ps.add("predicateType", "%s has no kube (it is %s's); this receipt has it", cdsse.Clip(predicateType), predicate.ReceiptV9)
		return
	case predicateType == predicate.ReceiptV9 && k == nil:
		ps.add("kube", "missing (a %s receipt records what the cluster reported of the run)", predicate.ReceiptV9)
		return
	case k == nil:
		return
	}
	if r.Profile.Backend != "kube" {
		ps.add("profile.backend", "%q: a kube record goes with backend kube", cdsse.Clip(r.Profile.Backend))
	}
	if u, err := url.Parse(k.Cluster.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		ps.add("kube.cluster.server", "%q is not an https URL", cdsse.Clip(k.Cluster.Server))
	}
	ps.hex64("kube.cluster.caSha256", k.Cluster.CASHA256)
	ps.text("kube.cluster.version", k.Cluster.Version)
	p := &r.Profile
	if id := p.Identity; id != nil && (id.Path != k.Cluster.Server || id.SHA256 != k.Cluster.CASHA256 || id.Version != k.Cluster.Version) {
		ps.add("profile.identity", "does not name the cluster kube.cluster names (server, CA digest, version)")
	}
	if p.Runtime.Path != k.Cluster.Server || p.Runtime.SHA256 != k.Cluster.CASHA256 {
		ps.add("profile.runtime", "does not name the cluster kube.cluster names (server, CA digest)")
	}
	// Empty when the pod was never read back (KubeQualified is then
	// false: the receipt is unqualified).
	ps.optText("kube.namespace", k.Namespace)
	for _, o := range []struct {
		name string
		o    KubeObject
	}{{"kube.pod", k.Pod}, {"kube.parent", k.Parent}} {
		ps.optText(o.name+".name", o.o.Name)
		ps.optText(o.name+".uid", o.o.UID)
	}
	unobserved := map[string]bool{}
	if !slices.IsSorted(k.Unobserved) || len(slices.Compact(slices.Clone(k.Unobserved))) != len(k.Unobserved) {
		ps.add("kube.unobserved", "not sorted without duplicates")
	}
	for i, name := range k.Unobserved {
		var one problems
		one.oneOf("", name, KubeUnobservable)
		ps.element("kube.unobserved", i, one)
		unobserved[name] = true
	}
	for _, f := range []struct{ name, v string }{{"node", k.Node}, {"handler", k.Handler}, {"imageId", k.ImageID}} {
		if unobserved[f.name] {
			if f.v != "" {
				ps.add("kube."+f.name, "%q, yet named unobserved", cdsse.Clip(f.v))
			}
			continue
		}
		ps.text("kube."+f.name, f.v)
	}
	ps.optText("kube.runtimeClass", k.RuntimeClass)
	ps.hex64("kube.podSpecSha256", k.PodSpecSHA256)
	if unobserved["podSpec"] != (len(k.PodSpec) == 0) {
		ps.add("kube.podSpec", "%d controls: the controls are named unobserved exactly when there are none", len(k.PodSpec))
	}
	for _, key := range slices.Sorted(maps.Keys(k.PodSpec)) {
		if !slices.Contains(KubePodSpecKeys, key) {
			ps.add("kube.podSpec", "%q is not one of %s", cdsse.Clip(key), strings.Join(KubePodSpecKeys, ", "))
			continue
		}
		ps.optText("kube.podSpec."+key, k.PodSpec[key])
	}
	c := k.Container
	if unobserved["container"] == c.Terminated {
		ps.add("kube.container.terminated", "%v: the container is named unobserved exactly when no termination was reported", c.Terminated)
	}
	if !c.Terminated && (c.ExitCode != 0 || c.Reason != "" || c.OOMKilled) {
		ps.add("kube.container", "an exit code, reason or OOM kill without a reported termination")
	}
	ps.optText("kube.container.reason", c.Reason)
	if np := k.NetworkPolicy; np != nil {
		ps.text("kube.networkPolicy.name", np.Name)
		ps.text("kube.networkPolicy.uid", np.UID)
		ps.hex64("kube.networkPolicy.specSha256", np.SpecSHA256)
		ps.oneOf("kube.networkPolicy.enforcement", np.Enforcement, kubeEnforcement)
	}
	if !KubeQualified(k, &r.Cleanup) && !p.Unqualified {
		ps.add("profile.unqualified", "false, but the cluster did not report everything a qualified kube receipt holds (kube.unobserved, a terminated container, each object's removal verified by UID)")
	}
}
