package platform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/egress"
)

// probePidfdNetns proves what restricted egress stands on: custodyd opens
// the proxy's listeners inside a sandbox's fresh network namespace by
// entering it through a pidfd (setns on a pidfd, Linux 5.8 or later). The
// probe does exactly that, through the same code, with a child of its own
// held blocked on a pipe in a new network namespace, and requires the
// listener to be in the child's namespace, not its own. fault, set only by tests
// and fault-injection builds, makes it report the fact disproved.
func probePidfdNetns(ctx context.Context, fault string) Fact {
	how := "started cat with CLONE_NEWNET and a pidfd, entered its network namespace by setns on the pidfd " +
		"and opened a TCP listener there, which the kernel placed in the child's namespace"
	if fault != "" {
		return Fact{How: how, Detail: "disproved by fault injection: " + fault}
	}
	cat, err := lookCat()
	if err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	pidfd := -1
	cmd := exec.CommandContext(ctx, cat)
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, PidFD: &pidfd}
	hold, err := cmd.StdinPipe() // cat blocks reading it until the probe is done
	if err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	if err := cmd.Start(); err != nil {
		return Fact{How: how, Detail: fmt.Sprintf("start the child in a new network namespace: %v", err)}
	}
	defer func() {
		hold.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if pidfd < 0 {
		return Fact{How: how, Detail: "the kernel returned no pidfd for the child (clone3 with CLONE_PIDFD needs Linux 5.3 or later)"}
	}
	defer unix.Close(pidfd)
	if err := listenThrough(pidfd, cmd.Process.Pid); err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	return Fact{OK: true, How: how}
}

// listenThrough opens a listener in the network namespace of the process
// pidfd names the way custodyd opens a sandbox's egress listeners, and
// requires the kernel to place the socket in that namespace (SIOCGSKNS)
// and not in the probe's own.
func listenThrough(pidfd, pid int) error {
	// Any address: lo is still down in the child's namespace (runc sets
	// it up in a sandbox's), and the namespace is what is probed.
	ln, err := egress.ListenInPidfd(pidfd, "0.0.0.0:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	raw, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		return err
	}
	var nsfd int
	var ierr error
	if err := raw.Control(func(fd uintptr) { nsfd, ierr = unix.IoctlRetInt(int(fd), unix.SIOCGSKNS) }); err != nil {
		return err
	}
	if ierr != nil {
		return fmt.Errorf("the listener's namespace (SIOCGSKNS): %w", ierr)
	}
	defer unix.Close(nsfd)
	var got, child, own unix.Stat_t
	if err := errors.Join(unix.Fstat(nsfd, &got), unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &child),
		unix.Stat("/proc/self/ns/net", &own)); err != nil {
		return fmt.Errorf("stat the namespaces: %w", err)
	}
	if got.Ino != child.Ino || got.Ino == own.Ino {
		return fmt.Errorf("the listener is in namespace %d, not the child's %d (own %d)", got.Ino, child.Ino, own.Ino)
	}
	return nil
}
