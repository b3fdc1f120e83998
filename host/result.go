package host

import "github.com/custody-dev/custody/runrecord"

// The run record's types are runrecord's; these are the names the
// host's code uses for them.
type (
	Result          = runrecord.Result
	Status          = runrecord.Status
	BackendIdentity = runrecord.BackendIdentity
	Output          = runrecord.Output
	LeftOut         = runrecord.LeftOut
	OutputFile      = runrecord.OutputFile
	Streams         = runrecord.Streams
	Stream          = runrecord.Stream
	Usage           = runrecord.Usage
	Cleanup         = runrecord.Cleanup
	PoolMember      = runrecord.PoolMember
)

// Run statuses (runrecord's).
const (
	StatusOK            = runrecord.StatusOK
	StatusFailed        = runrecord.StatusFailed
	StatusTimeout       = runrecord.StatusTimeout
	StatusOOM           = runrecord.StatusOOM
	StatusPidsLimit     = runrecord.StatusPidsLimit
	StatusRefused       = runrecord.StatusRefused
	StatusCancelled     = runrecord.StatusCancelled
	StatusFailedToStart = runrecord.StatusFailedToStart
)
