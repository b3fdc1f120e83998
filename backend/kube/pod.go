package kube

import (
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strings"

	"github.com/custody-dev/custody/backend"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations custody reserves on every object it makes.
const (
	LabelManagedBy = "custody.dev/managed-by"
	LabelWorkspace = "custody.dev/workspace"
	LabelRun       = "custody.dev/run"
	LabelAttempt   = "custody.dev/attempt"
	// AnnotationNonce carries the per-launch nonce journalled with the
	// intent, so that recovery can tell custody's object from a look-alike
	// even when it was killed before the object's UID was recorded.
	AnnotationNonce = "custody.dev/nonce"
	// SchedulingGate holds a prepared pod unscheduled until Run.
	SchedulingGate = "custody.dev/held"
	managedBy      = "custody"
	containerName  = "phase"
	// NamePrefix starts the name of every object custody makes.
	NamePrefix = "custody-"
)

// ErrRefused is the class of a Spec the kube backend cannot run as asked;
// nothing was created.
var ErrRefused = errors.New("refused by the kube backend")

var (
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	digestRef = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)
)

func refuse(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, a...))
}

// objectName is the name of both of a launch's objects; the id must make a
// valid object name and label value as it is, since a mangled one could
// collide with another launch's.
func objectName(id string) (string, error) {
	if !dnsLabel.MatchString(id) || len(NamePrefix)+len(id) > 63 {
		return "", refuse("launch id %q: the kube backend needs a lowercase DNS label of at most %d characters (letters, digits, '-') to name its objects by", id, 63-len(NamePrefix))
	}
	return NamePrefix + id, nil
}

// check refuses, before anything is made, a Spec the backend cannot run
// under the reviewed profile.
func check(s backend.Spec) error {
	for _, b := range []struct {
		name string
		v    float64
	}{
		{"output bytes", float64(s.OutputBytes)}, {"tmp bytes", float64(s.TmpBytes)},
		{"memory", float64(s.Memory)}, {"pids", float64(s.Pids)}, {"cpu", s.CPU}, {"file size", float64(s.FileSize)},
	} {
		if !(b.v > 0) || math.IsInf(b.v, 0) {
			return refuse("every budget is required and finite: the %s budget is %v", b.name, b.v)
		}
	}
	if s.UID == 0 {
		return refuse("the restricted Pod Security level runs workloads as a non-root user: give the phase a non-zero uid")
	}
	if len(s.Inputs) > 0 {
		return refuse("inputs are not delivered to pods yet (they will arrive verified by digest): run phases with inputs on another backend")
	}
	if s.Egress != nil {
		return refuse("restricted egress needs a NetworkPolicy whose enforcement was proved on the cluster, which is not done yet: run the phase with denied egress or on another backend")
	}
	if len(s.Args) == 0 {
		return refuse("the phase names no command")
	}
	if !path.IsAbs(s.OutputPath) || path.Clean(s.OutputPath) == "/" || path.Clean(s.OutputPath) == "/tmp" {
		return refuse("output path %q must be an absolute directory other than / and /tmp", s.OutputPath)
	}
	if s.Hostname != "" && !dnsLabel.MatchString(s.Hostname) {
		return refuse("hostname %q is not a DNS label, which a pod's hostname must be", s.Hostname)
	}
	for _, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return refuse("environment entry %q is not KEY=VALUE", kv)
		}
	}
	return nil
}

// podSpec is the Pod for one launch, held by a scheduling gate until Run:
// every control of the reviewed profile is set explicitly, never left to a
// cluster default.
func (b *Backend) pod(id, name, image, nonce string, parent metav1.OwnerReference, s backend.Spec) *corev1.Pod {
	t, f := true, false
	uid, gid := int64(s.UID), int64(s.GID)
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if b.cfg.SeccompLocalhost != "" {
		p := b.cfg.SeccompLocalhost
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &p}
	}
	milli := int64(math.Ceil(s.CPU * 1000))
	limits := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(milli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(s.Memory, resource.BinarySI),
		// The container's writable layer: the root is read-only, so
		// what it may write lands in the two bounded volumes.
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(s.TmpBytes+s.OutputBytes, resource.BinarySI),
	}
	var env []corev1.EnvVar
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	rc := b.cfg.RuntimeClass
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: b.cfg.Namespace,
			Labels:          b.labels(id),
			Annotations:     map[string]string{AnnotationNonce: nonce},
			OwnerReferences: []metav1.OwnerReference{parent},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			RuntimeClassName:              &rc,
			SchedulingGates:               []corev1.PodSchedulingGate{{Name: SchedulingGate}},
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			TerminationGracePeriodSeconds: &grace,
			Hostname:                      s.Hostname,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &t, RunAsUser: &uid, RunAsGroup: &gid,
				SeccompProfile: seccomp,
			},
			Volumes: []corev1.Volume{
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(s.TmpBytes, resource.BinarySI)}}},
				{Name: "output", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(s.OutputBytes, resource.BinarySI)}}},
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         s.Args,
				WorkingDir:      s.Cwd,
				Env:             env,
				Resources:       corev1.ResourceRequirements{Requests: limits.DeepCopy(), Limits: limits},
				SecurityContext: &corev1.SecurityContext{
					Privileged:               &f,
					AllowPrivilegeEscalation: &f,
					RunAsNonRoot:             &t,
					ReadOnlyRootFilesystem:   &t,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           seccomp,
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "output", MountPath: path.Clean(s.OutputPath)},
				},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
}

// policy is the run's NetworkPolicy: its pod selected by the run label,
// both directions named and no rule, so nothing in or out is allowed.
func (b *Backend) policy(id, name, nonce string, parent metav1.OwnerReference) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace, Labels: b.labels(id),
			Annotations: map[string]string{AnnotationNonce: nonce}, OwnerReferences: []metav1.OwnerReference{parent}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelWorkspace: b.cfg.Workspace, LabelRun: id}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

func (b *Backend) labels(id string) map[string]string {
	return map[string]string{
		LabelManagedBy: managedBy,
		LabelWorkspace: b.cfg.Workspace,
		LabelRun:       id,
		// One grant is one attempt: the launch id is the attempt the
		// journal opened for it.
		LabelAttempt: id,
	}
}

// ImageRef is the reference a pod pulls the launch's image by: repo at
// the OCI manifest digest the image was imported with, or, for an image
// imported as a plain tree, at custody's own digest of that tree, which
// no registry serves under another content (the pull fails rather than
// run something else).
func ImageRef(repo string, s backend.Spec) (string, error) {
	d := s.ImageManifest
	if d == "" {
		d = s.Image
	}
	if repo == "" || d == "" {
		return "", fmt.Errorf("no image repository (%q) or image digest (%q) to name the pod's image by", repo, d)
	}
	return repo + "@" + d, nil
}
