package launch

import (
	"maps"
	"slices"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/runrecord"
)

// kubeRecord adds to rc, a receipt of a run on the kube backend, what the
// cluster's API server reported of it (receipt v9), naming each value it
// did not report; a record that is not complete makes the receipt
// unqualified, whatever the run's tier (R10: runtime success without
// verified evidence is unqualified).
func kubeRecord(rc *evidence.Receipt, res *runrecord.Result) {
	if rc.Profile.Backend != string(backend.KindKube) {
		return
	}
	var pl backend.Placement
	if res.Observed != nil && res.Observed.Placement != nil {
		pl = *res.Observed.Placement
	}
	if pl.Server == "" && rc.Profile.Identity != nil {
		// Never read back: the cluster is the one the backend names.
		id := rc.Profile.Identity
		pl.Server, pl.CASHA256, pl.Version = id.Path, id.SHA256, id.Version
	}
	k := &evidence.Kube{
		Cluster:   evidence.KubeCluster{Server: pl.Server, CASHA256: pl.CASHA256, Version: pl.Version},
		Namespace: pl.Namespace,
		Pod:       evidence.KubeObject{Name: pl.PodName, UID: pl.PodUID},
		Parent:    evidence.KubeObject{Name: pl.ParentName, UID: pl.ParentUID},
		Node:      pl.Node, RuntimeClass: pl.RuntimeClass, Handler: pl.Handler, ImageID: pl.ImageID,
		PodSpecSHA256: pl.SpecSHA256, PodSpec: maps.Clone(pl.Spec),
		Container: evidence.KubeContainer{Terminated: pl.Terminated, ExitCode: pl.ExitCode, Reason: pl.Reason,
			OOMKilled: pl.OOMKilled, DeadlineExceeded: pl.DeadlineExceeded},
	}
	if k.PodSpecSHA256 == "" {
		// No spec was read back: the digest of nothing, with the spec
		// named unobserved.
		k.PodSpecSHA256 = emptySHA256
	}
	for name, missing := range map[string]bool{"node": k.Node == "", "handler": k.Handler == "", "imageId": k.ImageID == "",
		"podSpec": len(k.PodSpec) == 0, "container": !k.Container.Terminated} {
		if missing {
			k.Unobserved = append(k.Unobserved, name)
		}
	}
	slices.Sort(k.Unobserved)
	if pl.NetworkPolicyName != "" {
		enf := "unproved"
		if pl.NetworkPolicyProved {
			enf = "proved"
		}
		k.NetworkPolicy = &evidence.KubeNetworkPolicy{KubeObject: evidence.KubeObject{Name: pl.NetworkPolicyName, UID: pl.NetworkPolicyUID},
			SpecSHA256: pl.NetworkPolicySHA256, Enforcement: enf}
	}
	rc.Kube = k
	rc.Profile.Runtime.Path = k.Cluster.Server
	if !evidence.KubeQualified(k, &rc.Cleanup) {
		rc.Profile.Unqualified = true
	}
}
