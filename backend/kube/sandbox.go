package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

type state uint8

const (
	statePreparing state = iota
	statePrepared
	stateRunning
	stateFinished
	stateCleaned
)

type op uint8

const (
	opPrepared op = iota
	opRun
	opFinish
	opCleanup
)

var moves = map[state]map[op]state{
	statePreparing: {opPrepared: statePrepared, opCleanup: stateCleaned},
	statePrepared:  {opRun: stateRunning, opCleanup: stateCleaned},
	stateRunning:   {opFinish: stateFinished, opCleanup: stateCleaned},
	stateFinished:  {opCleanup: stateCleaned},
	stateCleaned:   {opCleanup: stateCleaned},
}

// ErrState is a sandbox operation its state does not allow.
var ErrState = errors.New("not allowed in the sandbox's state")

type sandbox struct {
	b                 *Backend
	id, name, nonce   string
	rec               backend.Recorder
	out               string
	life              *partial.Lifecycle[state, op]
	parentUID, podUID types.UID
	// effective is the pod as the API server returned it after create.
	effective     *corev1.Pod
	effectiveJSON []byte
	// policy is the run's NetworkPolicy as read back, once made.
	policy *policyRef
	last   *corev1.Pod
	// imageID is the container's image ID as a status first reported it
	// (a terminated status may no longer carry it).
	imageID string
	// liveAt is when the API server returned the released pod: the
	// observation's time, read while the pod was live.
	liveAt time.Time
}

// EffectivePod is the pod spec read back from the API server after it was
// created: what the cluster stored, defaults and admission included.
type EffectivePod interface {
	EffectivePod() (spec []byte, digest string)
}

var _ EffectivePod = (*sandbox)(nil)

func (s *sandbox) EffectivePod() ([]byte, string) {
	sum := sha256.Sum256(s.effectiveJSON)
	return s.effectiveJSON, hex.EncodeToString(sum[:])
}

func (s *sandbox) readBack(ctx context.Context) error {
	p, err := s.b.client.CoreV1().Pods(s.b.cfg.Namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read back pod %s: %w", s.name, err)
	}
	if p.UID != s.podUID {
		return &ForeignError{Kind: KindPod, Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	}
	return s.setEffective(p)
}

// readPolicy reads the run's NetworkPolicy back by its UID and keeps the
// digest of its spec as the API server stored it: a default-deny policy
// (no rule, both directions) or the run is refused.
func (s *sandbox) readPolicy(ctx context.Context, uid types.UID) error {
	np, err := s.b.client.NetworkingV1().NetworkPolicies(s.b.cfg.Namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read back network policy %s: %w", s.name, err)
	}
	if np.UID != uid {
		return &ForeignError{Kind: KindPolicy, Namespace: np.Namespace, Name: np.Name, UID: np.UID}
	}
	if len(np.Spec.Ingress) > 0 || len(np.Spec.Egress) > 0 || len(np.Spec.PolicyTypes) != 2 {
		return fmt.Errorf("network policy %s (uid %s) as stored is not default-deny (ingress %d rules, egress %d rules, types %v): an admission webhook changed it", s.name, uid, len(np.Spec.Ingress), len(np.Spec.Egress), np.Spec.PolicyTypes)
	}
	data, err := json.Marshal(np.Spec)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	s.policy = &policyRef{name: np.Name, uid: np.UID, sha256: hex.EncodeToString(sum[:])}
	return nil
}

// setEffective keeps p, as the API server returned it, as the pod's
// effective spec.
func (s *sandbox) setEffective(p *corev1.Pod) error {
	data, err := json.Marshal(p.Spec)
	if err != nil {
		return fmt.Errorf("read back pod %s: %w", s.name, err)
	}
	s.effective, s.effectiveJSON = p, data
	return nil
}

// Run releases the pod's scheduling gate and sets its active deadline in
// one patch that first tests the pod's UID, then follows it through the
// informer until it ends, the wall time passes, or ctx ends (then it is
// deleted by UID and verified gone).
func (s *sandbox) Run(ctx context.Context, wall time.Duration, out backend.IO) (*backend.Exit, error) {
	if wall <= 0 {
		return nil, fmt.Errorf("run with wall time %s: %w: a launch needs a positive wall time", wall, ErrState)
	}
	if from, ok := s.life.Move(opRun); !ok {
		return nil, fmt.Errorf("run in state %d: %w", from, ErrState)
	}
	defer s.life.Move(opFinish)
	wake, release := s.b.watch(s.podUID)
	defer release()
	deadline := int64(math.Ceil(wall.Seconds()))
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": string(s.podUID)},
		{"op": "remove", "path": "/spec/schedulingGates"},
		{"op": "add", "path": "/spec/activeDeadlineSeconds", "value": deadline},
	})
	if err != nil {
		return nil, err
	}
	started := time.Now()
	released, err := s.b.client.CoreV1().Pods(s.b.cfg.Namespace).Patch(ctx, s.name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("release pod %s (uid %s): %w", s.name, s.podUID, err)
	}
	// The spec as the API server stored it with the gate released and the
	// deadline set: the effective spec the receipt holds.
	s.liveAt = time.Now()
	if released.UID == s.podUID {
		if err := s.setEffective(released); err != nil {
			return nil, err
		}
	}
	timer := time.NewTimer(wall)
	defer timer.Stop()
	for {
		p, err := s.b.pods.Pods(s.b.cfg.Namespace).Get(s.name)
		if apierrors.IsNotFound(err) || (err == nil && p.UID != s.podUID) {
			// The informer may not have seen the pod yet: the API
			// server says whether it is really gone.
			p, err = s.b.client.CoreV1().Pods(s.b.cfg.Namespace).Get(ctx, s.name, metav1.GetOptions{})
		}
		switch {
		case apierrors.IsNotFound(err) || (err == nil && p.UID != s.podUID):
			return s.unobserved(started), fmt.Errorf("pod %s (uid %s) was deleted by someone else while it ran", s.name, s.podUID)
		case err != nil:
			return s.unobserved(started), fmt.Errorf("pod %s from the informer: %w", s.name, err)
		}
		s.last = p
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == containerName && c.ImageID != "" && s.imageID == "" {
				s.imageID = c.ImageID
			}
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			// The spec it ended under, bound to its node: the effective
			// spec the receipt holds.
			if err := s.setEffective(p); err != nil {
				return s.unobserved(started), err
			}
			return s.exit(p, started), nil
		}
		select {
		case <-wake:
		case <-timer.C:
			ex, err := s.stop(started)
			ex.TimedOut = true
			return ex, err
		case <-ctx.Done():
			ex, err := s.stop(started)
			ex.Cancelled = true
			return ex, err
		}
	}
}

// stop deletes the running pod by UID and verifies it gone.
func (s *sandbox) stop(started time.Time) (*backend.Exit, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.b.cleanupWithin())
	defer cancel()
	ex := s.unobserved(started)
	err := s.b.deleteByUID(ctx, KindPod, s.name, s.podUID)
	if err == nil {
		err = s.b.gone(ctx, KindPod, s.name, s.podUID, s.b.cleanupWithin())
	}
	if err != nil {
		return ex, fmt.Errorf("stopping pod %s: %w", s.name, err)
	}
	return ex, nil
}

func (s *sandbox) unobserved(started time.Time) *backend.Exit {
	return &backend.Exit{CodeUnobserved: true, Started: started, Finished: time.Now(),
		Usage:       backend.Usage{PeakMemoryBytes: -1, CPUTimeNanos: -1, OOMKills: -1, MemoryLimitBytes: -1, PidsLimit: -1},
		Observation: s.observation()}
}

// exit is the pod's end as the API server reports it.
func (s *sandbox) exit(p *corev1.Pod, started time.Time) *backend.Exit {
	ex := s.unobserved(started)
	ex.TimedOut = p.Status.Reason == "DeadlineExceeded"
	for _, c := range p.Status.ContainerStatuses {
		if c.Name != containerName || c.State.Terminated == nil {
			continue
		}
		t := c.State.Terminated
		ex.Code, ex.CodeUnobserved = int(t.ExitCode), false
		ex.OOMKilled = t.Reason == "OOMKilled"
		if !t.StartedAt.IsZero() {
			ex.Started = t.StartedAt.Time
		}
		if !t.FinishedAt.IsZero() {
			ex.Finished = t.FinishedAt.Time
		}
		// The kubelet's times have whole seconds: the observation, made
		// while the pod was live, is no later than its end.
		if ex.Observation.At.After(ex.Finished) {
			ex.Observation.At = ex.Finished
		}
	}
	return ex
}

// observation is what the API server says of the pod: where it ran and
// under what, read back, never taken from what custody sent. The node
// itself is not observed: seccomp and the rest are the spec's, which the
// placement records.
func (s *sandbox) observation() *backend.Observation {
	o := &backend.Observation{At: s.liveAt, Seccomp: "unobserved"}
	if o.At.IsZero() {
		o.At = time.Now()
	}
	p := s.effective
	if s.last != nil {
		p = s.last
	}
	if p == nil {
		o.Notes = []string{"the pod was never read back from the API server"}
		return o
	}
	o.Notes = []string{"read back from the Kubernetes API server, not from the node: the controls are the pod spec's as the cluster stored it"}
	o.Placement = s.placement(p)
	return o
}

// placement is what the cluster reported of the launch.
func (s *sandbox) placement(p *corev1.Pod) *backend.Placement {
	b := s.b
	pl := &backend.Placement{Server: b.host, CASHA256: b.caSHA256, Version: b.version, Namespace: b.cfg.Namespace,
		PodName: s.name, PodUID: string(s.podUID), ParentName: s.name, ParentUID: string(s.parentUID),
		Node: p.Spec.NodeName, Handler: b.handler, ImageID: s.imageID, Spec: podControls(s.effective)}
	if p.Spec.RuntimeClassName != nil {
		pl.RuntimeClass = *p.Spec.RuntimeClassName
	}
	if s.effectiveJSON != nil {
		_, pl.SpecSHA256 = s.EffectivePod()
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name != containerName || c.State.Terminated == nil {
			continue
		}
		t := c.State.Terminated
		pl.Terminated, pl.ExitCode, pl.Reason, pl.OOMKilled = true, int(t.ExitCode), t.Reason, t.Reason == "OOMKilled"
	}
	pl.DeadlineExceeded = p.Status.Reason == "DeadlineExceeded"
	if np := s.policy; np != nil {
		pl.NetworkPolicyName, pl.NetworkPolicyUID, pl.NetworkPolicySHA256 = np.name, string(np.uid), np.sha256
		pl.NetworkPolicyProved = false
	}
	return pl
}

// podControls are the controls of the effective pod spec a reviewer
// checks, by name, as the API server stored them.
func podControls(p *corev1.Pod) map[string]string {
	if p == nil || len(p.Spec.Containers) == 0 {
		return nil
	}
	spec, c := &p.Spec, &p.Spec.Containers[0]
	m := map[string]string{
		"image":         c.Image,
		"restartPolicy": string(spec.RestartPolicy),
		"hostNetwork":   strconv.FormatBool(spec.HostNetwork), "hostPID": strconv.FormatBool(spec.HostPID), "hostIPC": strconv.FormatBool(spec.HostIPC),
		"requestsEqualLimits": strconv.FormatBool(equality(c.Resources.Requests, c.Resources.Limits)),
	}
	boolp := func(key string, v *bool) {
		if v != nil {
			m[key] = strconv.FormatBool(*v)
		}
	}
	boolp("automountServiceAccountToken", spec.AutomountServiceAccountToken)
	if spec.ActiveDeadlineSeconds != nil {
		m["activeDeadlineSeconds"] = strconv.FormatInt(*spec.ActiveDeadlineSeconds, 10)
	}
	if sc := c.SecurityContext; sc != nil {
		boolp("privileged", sc.Privileged)
		boolp("allowPrivilegeEscalation", sc.AllowPrivilegeEscalation)
		boolp("readOnlyRootFilesystem", sc.ReadOnlyRootFilesystem)
		boolp("runAsNonRoot", sc.RunAsNonRoot)
		if sc.RunAsUser != nil {
			m["runAsUser"] = strconv.FormatInt(*sc.RunAsUser, 10)
		}
		if sc.Capabilities != nil {
			var drop []string
			for _, d := range sc.Capabilities.Drop {
				drop = append(drop, string(d))
			}
			m["capabilities.drop"] = strings.Join(drop, ",")
		}
		if sc.SeccompProfile != nil {
			m["seccompProfile"] = string(sc.SeccompProfile.Type)
			if sc.SeccompProfile.LocalhostProfile != nil {
				m["seccompProfile"] += ":" + *sc.SeccompProfile.LocalhostProfile
			}
		}
	}
	if psc := spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil && m["runAsUser"] == "" {
			m["runAsUser"] = strconv.FormatInt(*psc.RunAsUser, 10)
		}
		if psc.RunAsGroup != nil {
			m["runAsGroup"] = strconv.FormatInt(*psc.RunAsGroup, 10)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := c.Resources.Limits[r]; ok {
			m["limits."+string(r)] = q.String()
		}
	}
	var vols, hostPaths []string
	for _, v := range spec.Volumes {
		switch {
		case v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil:
			vols = append(vols, v.Name+":emptyDir("+v.EmptyDir.SizeLimit.String()+")")
		case v.EmptyDir != nil:
			vols = append(vols, v.Name+":emptyDir(unbounded)")
		case v.HostPath != nil:
			hostPaths = append(hostPaths, v.HostPath.Path)
			vols = append(vols, v.Name+":hostPath")
		default:
			vols = append(vols, v.Name+":other")
		}
	}
	m["volumes"] = strings.Join(vols, ",")
	m["hostPaths"] = strings.Join(hostPaths, ",")
	return m
}

// equality says the two resource lists name the same quantities.
func equality(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// Output is an empty host directory: outputs do not come back from pods
// yet (they will, by digest).
func (s *sandbox) Output() backend.Output { return outputDir(s.out) }

type outputDir string

func (d outputDir) Dir() string { return string(d) }

func (d outputDir) Used() (int64, error) {
	var n int64
	err := filepath.WalkDir(string(d), func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			i, err := e.Info()
			if err != nil {
				return err
			}
			n += i.Size()
		}
		return nil
	})
	return n, err
}

// Evidence is the digest of the pod spec read back from the API server.
func (s *sandbox) Evidence() map[string]string {
	if s.effectiveJSON == nil {
		return nil
	}
	_, d := s.EffectivePod()
	return map[string]string{"podspec": d}
}

// Cleanup deletes the parent (foreground: the pod goes first) and the pod,
// each by UID, and verifies both gone by UID.
func (s *sandbox) Cleanup(ctx context.Context) backend.CleanupReport {
	s.life.Move(opCleanup)
	rep := backend.CleanupReport{Verified: true}
	for _, o := range []struct {
		kind string
		uid  types.UID
	}{{KindParent, s.parentUID}, {KindPolicy, s.policyUID()}, {KindPod, s.podUID}} {
		if o.uid == "" {
			continue
		}
		err := s.b.deleteByUID(ctx, o.kind, s.name, o.uid)
		if err == nil {
			err = s.b.gone(ctx, o.kind, s.name, o.uid, s.b.cleanupWithin())
		}
		if err == nil {
			err = s.rec.Removed(s.b.resource(o.kind, s.name, s.nonce, o.uid))
		}
		partial.Step(&rep, fmt.Sprintf("%s %s (uid %s) gone", o.kind, s.name, o.uid), err)
	}
	partial.Step(&rep, "output directory removed", os.RemoveAll(s.out))
	return rep
}

// policyUID is the UID of the run's NetworkPolicy, if it was read back.
func (s *sandbox) policyUID() types.UID {
	if s.policy == nil {
		return ""
	}
	return s.policy.uid
}

// policyRef is a NetworkPolicy read back: name, UID and the digest of its
// spec as the API server stored it.
type policyRef struct {
	name   string
	uid    types.UID
	sha256 string
}
