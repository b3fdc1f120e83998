package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ErrNotExist means the runtime has no container with that id.
var ErrNotExist = errors.New("container does not exist")

// runc drives one verified runtime binary with its own state root. Every
// call takes a context, passes --log, and turns failures into errors that
// carry the runtime's own message.
type runc struct {
	bin  *Binary
	root string // runc --root: this runner's private container state
}

// State is the subset of `runc state` that the runner uses.
type State struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

func (r *runc) command(ctx context.Context, logPath string, args ...string) *exec.Cmd {
	base := []string{"--root", r.root, "--log", logPath, "--log-format", "json"}
	cmd := exec.CommandContext(ctx, r.bin.Path(), append(base, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"} // nothing ambient
	// Cancelling ctx must not leave a half-done runtime call; the caller
	// cleans up through kill/delete, so give runc a moment to finish.
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

func (r *runc) run(ctx context.Context, logPath string, args ...string) ([]byte, error) {
	cmd := r.command(ctx, logPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = lastLogError(logPath)
		}
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not exist") {
			return nil, fmt.Errorf("runc %s: %w: %s", args[0], ErrNotExist, msg)
		}
		return nil, fmt.Errorf("runc %s: %w: %s", args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// startRun starts `runc run` in the foreground: runc creates and starts the
// container, reaps its init, deletes it and exits with the workload's
// status. The container's stdio are the given files, passed straight
// through; control, gate and filter become its descriptors 3, 4 and 5.
func (r *runc) startRun(ctx context.Context, logPath, id, bundle string, stdout, stderr, control, gate, filter *os.File) (*exec.Cmd, error) {
	// Not bound to ctx: on cancellation the backend kills the container
	// itself and lets runc delete it.
	cmd := r.command(context.WithoutCancel(ctx), logPath, "run", "--bundle", bundle, "--preserve-fds", "3", id)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, stdout, stderr
	cmd.ExtraFiles = []*os.File{control, gate, filter}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("runc run: %w", err)
	}
	return cmd, nil
}

func (r *runc) kill(ctx context.Context, logPath, id, signal string) error {
	_, err := r.run(ctx, logPath, "kill", id, signal)
	return err
}

func (r *runc) delete(ctx context.Context, logPath, id string, force bool) error {
	args := []string{"delete"}
	if force {
		args = append(args, "--force")
	}
	_, err := r.run(ctx, logPath, append(args, id)...)
	return err
}

func (r *runc) state(ctx context.Context, logPath, id string) (*State, error) {
	out, err := r.run(ctx, logPath, "state", id)
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("runc state: %w", err)
	}
	return &s, nil
}

// lastLogError returns the last error-level message in a runc JSON log.
func lastLogError(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var e struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(lines[i], &e) == nil && (e.Level == "error" || e.Level == "fatal") {
			return e.Msg
		}
	}
	return ""
}
