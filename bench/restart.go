package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/custody-dev/custody/daemon/config"
)

// spawn starts custodyd with the daemon's binary and arguments, its output
// appended to the log.
func (d *Daemon) spawn(context.Context) error {
	d.cmd = exec.Command(d.bin, d.args...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		d.cmd = nil
		return fmt.Errorf("start custodyd: %w", err)
	}
	done := make(chan error, 1)
	d.done = done
	cmd := d.cmd
	go func() { done <- cmd.Wait() }()
	return nil
}

// waitReady waits (ReadyTimeout, 20 s if unset) until custodyd answers
// on its control socket, or says how it exited meanwhile.
func (d *Daemon) waitReady(ctx context.Context) error {
	limit := d.ReadyTimeout
	if limit <= 0 {
		limit = 20 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- d.Control.WaitReady(wctx) }()
	select {
	case err := <-ready:
		return err
	case err := <-d.done:
		d.done <- err
		return fmt.Errorf("custodyd exited at start: %v", err)
	}
}

// Kill sends custodyd SIGKILL, as a crash or an OOM kill would end it, and
// waits for it to be gone. Nothing is cleaned up: the next start's
// recovery has to.
func (d *Daemon) Kill() error {
	if d.cmd == nil || d.cmd.Process == nil {
		return errors.New("custodyd is not running")
	}
	if err := d.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill custodyd: %w", err)
	}
	<-d.done
	d.cmd = nil
	d.logs.Close()
	return nil
}

// Restart starts custodyd again on the same configuration and state (after
// Kill or Stop) and waits until it is ready: it recovers what the last
// process left before it answers.
func (d *Daemon) Restart(ctx context.Context) error {
	if d.cmd != nil {
		return errors.New("custodyd is still running")
	}
	var err error
	if d.logs, err = os.OpenFile(d.LogPath, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return err
	}
	if err := d.spawn(ctx); err != nil {
		return err
	}
	if err := d.waitReady(ctx); err != nil {
		return fmt.Errorf("%w\ncustodyd log (%s):\n%s", err, d.LogPath, d.LogTail(20))
	}
	return nil
}

// Reconfigure edits custodyd's configuration file; a (re)start reads it.
func (d *Daemon) Reconfigure(edit func(*config.Config)) error {
	edit(&d.cfg)
	data, err := d.cfg.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(d.cfgPath, data, 0o600)
}

// Config is custodyd's configuration as written.
func (d *Daemon) Config() config.Config { return d.cfg }
