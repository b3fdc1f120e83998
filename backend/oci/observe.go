package oci

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/procfs"
)

// namespaceKinds are the namespaces observe compares with the daemon's.
var namespaceKinds = []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts", "time"}

// ownNamespaces reads this process's namespaces once: a kind the kernel
// does not have is left out, and observe skips it as before.
func ownNamespaces() map[string]string {
	own := map[string]string{}
	for _, ns := range namespaceKinds {
		if l, err := os.Readlink(filepath.Join("/proc/self/ns", ns)); err == nil {
			own[ns] = l
		}
	}
	return own
}

// observe reads the container's first process while the gate holds it:
// every namespace, mount, capability drop, no_new_privs and the seccomp
// filter are in place, and the workload has not started, so the read
// cannot race it.
func (c *Container) observe(pid int) *backend.Observation {
	o := &backend.Observation{At: time.Now().UTC(), Capabilities: map[string]string{}, Seccomp: "unobserved"}
	proc := fmt.Sprintf("/proc/%d", pid)
	// The namespace links and the three files are read relative to one
	// descriptor of the process's directory: its path is walked once, not
	// per read.
	dir, dirErr := procfs.OpenDir(proc)
	if dirErr == nil {
		defer unix.Close(dir)
	}
	read := func(name string, sizeHint int) ([]byte, error) {
		if dirErr != nil {
			return nil, dirErr
		}
		return procfs.ReadFileAt(dir, name, sizeHint)
	}
	var link [256]byte
	for _, ns := range namespaceKinds {
		if dirErr != nil {
			break // each link would be unreadable: none is compared, as before
		}
		n, err := unix.Readlinkat(dir, "ns/"+ns, link[:])
		ours, known := c.b.ownNS[ns]
		if err != nil || !known || n >= len(link) {
			continue
		}
		if string(link[:n]) != ours {
			o.Namespaces = append(o.Namespaces, ns)
		}
	}
	if b, err := read("status", 4096); err == nil {
		st := procfs.ParseStatus(b)
		o.Capabilities = st.Caps
		o.NoNewPrivs = st.NoNewPrivs == 1
		switch st.Seccomp {
		case 0:
			o.Seccomp = "disabled"
		case 1:
			o.Seccomp = "strict"
		case 2:
			o.Seccomp = "filter"
		}
	} else {
		o.Notes = append(o.Notes, "status unreadable: "+err.Error())
	}
	if mi, err := read("mountinfo", 16<<10); err == nil {
		o.Mounts = parseMounts(mi)
	} else {
		o.Notes = append(o.Notes, "mountinfo unreadable: "+err.Error())
	}
	if nd, err := read("net/dev", 4096); err == nil {
		o.Interfaces = procfs.ParseNetDev(nd)
	}
	o.Cgroup.MemoryLimitBytes, o.Cgroup.PidsLimit = c.cgroups.limits()
	o.Cgroup.CPUQuotaMicros, o.Cgroup.CPUPeriodMicros = c.cgroups.cpuQuota()
	return o
}

// parseMounts reads a mountinfo table; the library undoes the kernel's
// octal escaping, so a target with a space reads as it was mounted. A table
// it cannot parse yields no mounts, as an unreadable one does.
func parseMounts(mi []byte) []backend.ObservedMount {
	ms, err := mountinfo.GetMountsFromReader(bytes.NewReader(mi), nil)
	if err != nil {
		return nil
	}
	out := make([]backend.ObservedMount, 0, len(ms))
	for _, m := range ms {
		out = append(out, backend.ObservedMount{Target: m.Mountpoint, FSType: m.FSType,
			ReadOnly: slices.Contains(strings.Split(m.Options, ","), "ro")})
	}
	return out
}
