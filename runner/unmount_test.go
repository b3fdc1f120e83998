package runner_test

import "golang.org/x/sys/unix"

func unmount(p string) error { return unix.Unmount(p, 0) }
