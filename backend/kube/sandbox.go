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
	last          *corev1.Pod
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
	if _, err := s.b.client.CoreV1().Pods(s.b.cfg.Namespace).Patch(ctx, s.name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("release pod %s (uid %s): %w", s.name, s.podUID, err)
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
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex := s.unobserved(started)
	err := s.b.deleteByUID(ctx, KindPod, s.name, s.podUID)
	if err == nil {
		err = s.b.gone(ctx, KindPod, s.name, s.podUID, 2*time.Minute)
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
	}
	return ex
}

// observation is what the API server says of the pod: where it ran and
// under what, read back, never taken from what custody sent.
func (s *sandbox) observation() *backend.Observation {
	o := &backend.Observation{At: time.Now()}
	p := s.effective
	if s.last != nil {
		p = s.last
	}
	if p == nil {
		return o
	}
	if sc := p.Spec.SecurityContext; sc != nil && sc.SeccompProfile != nil {
		o.Seccomp = string(sc.SeccompProfile.Type)
	}
	if len(p.Spec.Containers) > 0 {
		if c := p.Spec.Containers[0].SecurityContext; c != nil && c.AllowPrivilegeEscalation != nil {
			o.NoNewPrivs = !*c.AllowPrivilegeEscalation
		}
	}
	rc := ""
	if p.Spec.RuntimeClassName != nil {
		rc = *p.Spec.RuntimeClassName
	}
	_, digest := s.EffectivePod()
	o.Notes = append(o.Notes,
		"read back from the Kubernetes API server, not from the node",
		"pod "+p.Namespace+"/"+p.Name+" uid "+string(p.UID),
		"node "+p.Spec.NodeName,
		"runtime class "+rc,
		"effective pod spec sha256 "+digest)
	for _, c := range p.Status.ContainerStatuses {
		if c.ImageID != "" {
			o.Notes = append(o.Notes, "image id "+c.ImageID)
		}
	}
	return o
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
	}{{KindParent, s.parentUID}, {KindPod, s.podUID}} {
		if o.uid == "" {
			continue
		}
		err := s.b.deleteByUID(ctx, o.kind, s.name, o.uid)
		if err == nil {
			err = s.b.gone(ctx, o.kind, s.name, o.uid, 2*time.Minute)
		}
		if err == nil {
			err = s.rec.Removed(s.b.resource(o.kind, s.name, s.nonce, o.uid))
		}
		partial.Step(&rep, fmt.Sprintf("%s %s (uid %s) gone", o.kind, s.name, o.uid), err)
	}
	partial.Step(&rep, "output directory removed", os.RemoveAll(s.out))
	return rep
}
