package egress_test

import "syscall"

var errNoRoute = syscall.ENETUNREACH
