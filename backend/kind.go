package backend

// Kind names a backend: the one spelling a request, a policy, a grant, a
// receipt and a qualification row use for it. Those formats carry it as a
// plain string, so their published spellings are these constants' values
// and do not change.
type Kind string

// The backends custody runs.
const (
	// KindOCI runs each phase in a container under the pinned OCI runtime
	// (runc); a phase that names no backend runs on it.
	KindOCI Kind = "oci"
	// KindVM runs each phase in its own QEMU microVM.
	KindVM Kind = "vm"
	// KindKube runs each phase as a pod on a Kubernetes cluster.
	KindKube Kind = "kube"
	// KindDocker runs docker phases and packs on a local Docker engine.
	KindDocker Kind = "docker"
)
