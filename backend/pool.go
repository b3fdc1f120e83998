package backend

import (
	"context"
	"syscall"
	"time"
)

// Pooler is the optional capability of a backend that can prepare a
// sandbox before its grant exists: for a pool profile the operator
// declared, up to the gate (namespaces, mounts, cgroup and filter in
// place, nothing of any workload run), and hold it there. The launch
// library owns the interface; a backend without it (docker) is launched cold.
type Pooler interface {
	// PrepareHeld makes a sandbox for s and starts it up to the gate,
	// recording each resource on rec as Prepare does (the caller has
	// journalled Intents(id) durably). On error the returned Held, if
	// non-nil, still needs Destroy.
	PrepareHeld(ctx context.Context, id string, s HeldSpec, rec Recorder) (Held, error)
	// CheckRuntime verifies the runtime still is the one pinned (its
	// digest): the pool drains every member when it is not.
	CheckRuntime(ctx context.Context) error
}

// HeldSpec is what a pool profile fixes of a sandbox before a grant: every
// part of Spec that the runtime applies when it creates the container.
// What a grant brings (its inputs, argv, environment, working directory
// and stop signal) is attached at Take.
type HeldSpec struct {
	Rootfs string
	// Sealed, when not nil, is the image's sealed file, mounted instead of
	// Rootfs by a backend that mounts seals (as Spec.Sealed).
	Sealed      *SealedImage
	Hostname    string
	UID, GID    uint32
	Nofile      int64
	OutputPath  string
	OutputBytes int64
	OutputFiles int64
	TmpBytes    int64
	Memory      int64
	Pids        int64
	CPU         float64
	FileSize    int64
}

// Held is one sandbox held at its gate. It serves at most one launch:
// Take hands it over, and every later Take is refused.
type Held interface {
	// ID is the sandbox's native id.
	ID() string
	// PreparedAt is when the sandbox reached its gate.
	PreparedAt() time.Time
	// Alive says the sandbox is still held at its gate, nil if so: a
	// sandbox whose gate died is destroyed, never taken.
	Alive() error
	// Take attaches one launch's inputs (read-only, from their
	// immutable snapshots) and its process, and returns the Sandbox
	// whose Run observes the live sandbox and sends the go-ahead. Its
	// output filesystem is the sandbox's own, made at preparation and
	// verified empty here. On error the Held must be destroyed.
	Take(ctx context.Context, a Attachment) (Sandbox, error)
	// Destroy removes an untaken sandbox and verifies every part gone
	// (for a taken one, the Sandbox's Cleanup does).
	Destroy(ctx context.Context) CleanupReport
}

// Attachment is what one grant brings to a held sandbox.
type Attachment struct {
	Args []string
	// Env is exactly the declared variables, KEY=VALUE, sorted.
	Env        []string
	Cwd        string
	StopSignal syscall.Signal
	// Inputs are bound read-only; a writable input is never pooled.
	Inputs []Mount
}
