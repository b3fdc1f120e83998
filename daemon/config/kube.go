package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"time"
)

// KubeConfig is the kube backend: the cluster custodyd places phases on,
// and the bounds of what it may do there.
type KubeConfig struct {
	// Kubeconfig is the absolute path of the kubeconfig custodyd uses. Its
	// identity needs exactly the Role the kube backend's how-to gives, in
	// Namespace; the cluster is identified by its API server URL and the
	// digest of the CA the kubeconfig names.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds every object custody makes on the cluster.
	Namespace string `yaml:"namespace"`
	// RuntimeClasses are the RuntimeClasses custodyd may run pods under;
	// phases run under the first, and custody qualify qualifies each.
	RuntimeClasses []string `yaml:"runtimeClasses"`
	// Workspace is the value of the workspace label on every object
	// (default "custody"): one per runner sharing a namespace.
	Workspace string `yaml:"workspace,omitempty"`
	// ImageRepository is where the cluster pulls a phase's image from, by
	// the phase's image digest: <imageRepository>@sha256:<hex>.
	ImageRepository string `yaml:"imageRepository"`
	// SeccompLocalhost, when set, is custody's seccomp profile on the
	// nodes (relative to the kubelet's seccomp root); empty runs pods
	// under RuntimeDefault. The receipt records which was applied.
	SeccompLocalhost string `yaml:"seccompLocalhost,omitempty"`
	// QPS and Burst bound custodyd's API request rate on the cluster
	// (defaults 20 and 40).
	QPS   float32 `yaml:"qps,omitempty"`
	Burst int     `yaml:"burst,omitempty"`
	// CleanupWithin is how long custodyd waits for a deleted object to be
	// verified gone before it quarantines the cluster (default 2m).
	CleanupWithin string `yaml:"cleanupWithin,omitempty"`
}

// CleanupTimeout is CleanupWithin as a duration (0: the default).
func (k *KubeConfig) CleanupTimeout() time.Duration {
	d, _ := time.ParseDuration(k.CleanupWithin)
	return d
}

var (
	kubeLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	kubeRepo  = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)
)

// WorkspaceOrDefault is the workspace label's value.
func (k *KubeConfig) WorkspaceOrDefault() string {
	if k.Workspace == "" {
		return "custody"
	}
	return k.Workspace
}

func (k *KubeConfig) validate() error {
	if !filepath.IsAbs(k.Kubeconfig) {
		return fmt.Errorf("kube.kubeconfig %q must be an absolute path; fix: name the kubeconfig custodyd's identity on the cluster uses", k.Kubeconfig)
	}
	if !kubeLabel.MatchString(k.Namespace) || len(k.Namespace) > 63 {
		return fmt.Errorf("kube.namespace %q is not a namespace name (a lowercase DNS label)", k.Namespace)
	}
	if len(k.RuntimeClasses) == 0 {
		return fmt.Errorf("kube.runtimeClasses is empty; fix: name the RuntimeClasses custodyd may run pods under (the first is used for phases)")
	}
	seen := map[string]bool{}
	for _, rc := range k.RuntimeClasses {
		if !kubeLabel.MatchString(rc) || len(rc) > 63 || seen[rc] {
			return fmt.Errorf("kube.runtimeClasses %v: %q is not a RuntimeClass name or is listed twice", k.RuntimeClasses, rc)
		}
		seen[rc] = true
	}
	if w := k.WorkspaceOrDefault(); !kubeLabel.MatchString(w) || len(w) > 63 {
		return fmt.Errorf("kube.workspace %q must be a lowercase DNS label (it is a label value)", w)
	}
	if !kubeRepo.MatchString(k.ImageRepository) {
		return fmt.Errorf("kube.imageRepository %q is not an image repository (host[:port]/path, lowercase); fix: name where the cluster pulls phase images from by digest", k.ImageRepository)
	}
	if k.CleanupWithin != "" {
		if d, err := time.ParseDuration(k.CleanupWithin); err != nil || d <= 0 {
			return fmt.Errorf("kube.cleanupWithin %q is not a positive duration (e.g. 2m)", k.CleanupWithin)
		}
	}
	if k.QPS < 0 || k.Burst < 0 {
		return fmt.Errorf("kube.qps %v and kube.burst %d must not be negative (0 takes the defaults 20 and 40)", k.QPS, k.Burst)
	}
	return nil
}
