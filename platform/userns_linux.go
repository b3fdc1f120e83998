package platform

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// probeUserNS proves that a child can be started in a new user namespace
// with an ID mapping, the way a runtime starts a rootless or userns-remapped
// container. The child prints its own uid_map: in the initial namespace
// that is the identity map "0 0 4294967295", so seeing exactly the one-line
// mapping the probe asked for shows the child ran inside the new namespace.
func probeUserNS(ctx context.Context) Fact {
	uid, gid := os.Getuid(), os.Getgid()
	want := fmt.Sprintf("0 %d 1", uid)
	how := fmt.Sprintf("started cat /proc/self/uid_map with CLONE_NEWUSER, mapping uid 0 to host uid %d "+
		"and gid 0 to host gid %d; it must exit 0 and print exactly the mapping %q", uid, gid, want)

	cat, err := lookCat()
	if err != nil {
		return Fact{How: how, Detail: err.Error()}
	}
	cmd := exec.CommandContext(ctx, cat, "/proc/self/uid_map")
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Fact{How: how, Detail: fmt.Sprintf("user namespace child: %v: %s", err, strings.TrimSpace(stderr.String()))}
	}
	got := strings.Join(strings.Fields(string(out)), " ")
	if got != want {
		return Fact{How: how, Detail: fmt.Sprintf("child saw uid_map %q, want %q", got, want)}
	}
	return Fact{OK: true, How: how}
}

// lookCat finds cat(1) at a fixed location rather than through $PATH, so
// the probe does not run whatever a caller's environment points at.
func lookCat() (string, error) {
	for _, p := range []string{"/bin/cat", "/usr/bin/cat"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no cat binary at /bin/cat or /usr/bin/cat to run in the namespace")
}
