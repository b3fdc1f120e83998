package platform

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/custody-dev/custody/internal/testenv"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Sample mount tables, trimmed from real hosts.
const (
	// This project's CI host: tmpfs at /sys/fs/cgroup, one v1 hierarchy
	// per controller, and cgroup2 at unified with no controllers but
	// hugetlb.
	mountInfoHybrid = `22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	// A systemd v1 host: combined cpu,cpuacct, and a container runtime's
	// bind mount of the memory hierarchy elsewhere.
	mountInfoV1 = `25 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
90 25 0:31 /docker /var/lib/x/memory rw - cgroup cgroup rw,memory
34 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
35 30 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
`
	// A modern systemd host, plus a legacy named v1 hierarchy some
	// container tools mount for old images.
	mountInfoV2 = `25 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
60 25 0:50 / /run/legacy\040cgroup rw - cgroup cgroup rw,none,name=systemd
`
	mountInfoNone = `25 0 8:1 / / rw,relatime - ext4 /dev/sda1 rw
`
)

func mustParseMountInfo(t *testing.T, s string) []mountInfo {
	t.Helper()
	m, err := parseMountInfo(strings.NewReader(s))
	if err != nil {
		t.Fatalf("parseMountInfo: %v", err)
	}
	return m
}

func TestParseMountInfo(t *testing.T) {
	m := mustParseMountInfo(t, mountInfoV1+mountInfoV2)
	got := m[3] // no optional fields, mounted subtree
	want := mountInfo{ID: 90, Parent: 25, Major: 0, Minor: 31, Root: "/docker", MountPoint: "/var/lib/x/memory",
		FSType: "cgroup", Source: "cgroup", SuperOptions: []string{"rw", "memory"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("line 4:\n got %+v\nwant %+v", got, want)
	}
	got = m[1] // one optional field
	if got.MountPoint != "/sys/fs/cgroup" || got.FSType != "tmpfs" || got.Major != 0 || got.Minor != 26 {
		t.Errorf("line 2: got %+v", got)
	}
	if mp := m[len(m)-1].MountPoint; mp != "/run/legacy cgroup" {
		t.Errorf("escaped mount point: got %q, want %q", mp, "/run/legacy cgroup")
	}

	for _, bad := range []string{
		"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 ext3 /dev/root rw", // no separator
		`36 35 98:0 / /mnt\04 rw - ext3 /dev/root rw`,                  // truncated escape
		"36 35 98 / /mnt rw - ext3 /dev/root rw",
		"36 35 98:0 / /mnt rw - ext3",
	} {
		if _, err := parseMountInfo(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMountInfo(%q): no error", bad)
		}
	}
}

// TestParseMountInfoEscapes checks the kernel's octal escapes of space,
// tab, newline and backslash in mount points come back as the bytes.
func TestParseMountInfoEscapes(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:         "/plain",
		`/a\040b`:        "/a b",
		`/tab\011nl\012`: "/tab\tnl\n",
		`/back\134slash`: `/back\slash`,
	} {
		m := mustParseMountInfo(t, "36 35 98:0 / "+in+" rw - ext3 /dev/root rw\n")
		if got := m[0].MountPoint; got != want {
			t.Errorf("mount point %q = %q, want %q", in, got, want)
		}
	}
}

func TestClassifyCgroups(t *testing.T) {
	type v1 struct{ controllers, name, mountPoint string }
	for _, tc := range []struct {
		name    string
		info    string
		mode    CgroupMode
		unified string
		v1      []v1
	}{
		{"hybrid", mountInfoHybrid, CgroupHybrid, "/sys/fs/cgroup/unified", []v1{
			{"blkio", "", "/sys/fs/cgroup/blkio"},
			{"cpu", "", "/sys/fs/cgroup/cpu"},
			{"cpuacct", "", "/sys/fs/cgroup/cpuacct"},
			{"memory", "", "/sys/fs/cgroup/memory"},
			{"pids", "", "/sys/fs/cgroup/pids"},
			{"", "systemd", "/sys/fs/cgroup/systemd"},
		}},
		// The memory hierarchy is mounted twice; the mount under the cgroup
		// root wins even though the other comes first.
		{"v1", mountInfoV1, CgroupV1, "", []v1{
			{"cpu,cpuacct", "", "/sys/fs/cgroup/cpu,cpuacct"},
			{"memory", "", "/sys/fs/cgroup/memory"},
			{"pids", "", "/sys/fs/cgroup/pids"},
			{"", "systemd", "/sys/fs/cgroup/systemd"},
		}},
		// A named hierarchy binds no controller, so it does not make the
		// host hybrid.
		{"v2", mountInfoV2, CgroupV2, "/sys/fs/cgroup", []v1{
			{"", "systemd", "/run/legacy cgroup"},
		}},
		{"none", mountInfoNone, CgroupNone, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := classifyCgroups(mustParseMountInfo(t, tc.info), "/sys/fs/cgroup")
			if l.Mode != tc.mode {
				t.Errorf("mode = %q, want %q", l.Mode, tc.mode)
			}
			var unified string
			if l.Unified != nil {
				unified = l.Unified.MountPoint
			}
			if unified != tc.unified {
				t.Errorf("unified = %q, want %q", unified, tc.unified)
			}
			var got []v1
			for _, h := range l.V1 {
				got = append(got, v1{strings.Join(h.Controllers, ","), h.Name, h.Mount.MountPoint})
			}
			if !reflect.DeepEqual(got, tc.v1) {
				t.Errorf("v1 hierarchies:\n got %q\nwant %q", got, tc.v1)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	const sample = `9:name=systemd:/
4:memory:/supervisor/32a0
2:cpu,cpuacct:/a:b
0::/user.slice/session-1.scope
`
	cgs, err := parseProcCgroup(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []procCgroup{
		{ID: 9, Controllers: []string{"name=systemd"}, Path: "/"},
		{ID: 4, Controllers: []string{"memory"}, Path: "/supervisor/32a0"},
		{ID: 2, Controllers: []string{"cpu", "cpuacct"}, Path: "/a:b"},
		{ID: 0, Path: "/user.slice/session-1.scope"},
	}
	if !reflect.DeepEqual(cgs, want) {
		t.Fatalf("parseProcCgroup:\n got %+v\nwant %+v", cgs, want)
	}

	if p, err := unifiedPath(cgs); err != nil || p != "/user.slice/session-1.scope" {
		t.Errorf("unifiedPath = %q, %v", p, err)
	}
	for _, tc := range []struct {
		h    hierarchy
		want string
	}{
		{hierarchy{Controllers: []string{"memory"}}, "/supervisor/32a0"},
		{hierarchy{Controllers: []string{"cpuacct"}}, "/a:b"},
		{hierarchy{Name: "systemd"}, "/"},
	} {
		if p, err := v1Path(cgs, tc.h); err != nil || p != tc.want {
			t.Errorf("v1Path(%s) = %q, %v; want %q", hierarchyLabel(tc.h), p, err, tc.want)
		}
	}
	if _, err := v1Path(cgs, hierarchy{Controllers: []string{"pids"}}); err == nil {
		t.Error("v1Path(pids): no error for a hierarchy the process is not in")
	}
	if _, err := unifiedPath(cgs[:3]); err == nil {
		t.Error("unifiedPath on a v1-only host: no error")
	}
	for _, bad := range []string{"4:memory", "x:memory:/"} {
		if _, err := parseProcCgroup(strings.NewReader(bad)); err == nil {
			t.Errorf("parseProcCgroup(%q): no error", bad)
		}
	}
}

func TestCgroupDir(t *testing.T) {
	for _, tc := range []struct {
		root, mountPoint, cg, want string
	}{
		{"/", "/sys/fs/cgroup/memory", "/supervisor/x", "/sys/fs/cgroup/memory/supervisor/x"},
		{"/", "/sys/fs/cgroup", "/", "/sys/fs/cgroup"},
		// A container sees only its own subtree of the hierarchy.
		{"/docker/abc", "/sys/fs/cgroup/memory", "/docker/abc", "/sys/fs/cgroup/memory"},
		{"/docker/abc", "/sys/fs/cgroup/memory", "/docker/abc/sub", "/sys/fs/cgroup/memory/sub"},
		{"/docker/abc", "/sys/fs/cgroup/memory", "/docker/other", ""},
		{"/docker", "/sys/fs/cgroup/memory", "/", ""},
	} {
		got, err := cgroupDir(mountInfo{Root: tc.root, MountPoint: tc.mountPoint}, tc.cg)
		if tc.want == "" {
			if err == nil {
				t.Errorf("cgroupDir(root %s, %s) = %q, want error", tc.root, tc.cg, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("cgroupDir(root %s, %s) = %q, %v; want %q", tc.root, tc.cg, got, err, tc.want)
		}
	}
}

func TestV2MissingReason(t *testing.T) {
	v2host := classifyCgroups(mustParseMountInfo(t, mountInfoV2), "/sys/fs/cgroup")
	probe := v2Probe{
		Parent:            "/sys/fs/cgroup/user.slice",
		RootControllers:   []string{"cpu", "io", "memory", "pids"},
		ParentControllers: []string{"cpu", "memory", "pids"},
		Delegated:         []string{"cpu"},
	}
	for c, want := range map[string]string{
		"memory": "not delegated: enable it in /sys/fs/cgroup/user.slice/cgroup.subtree_control",
		"io":     "not delegated to /sys/fs/cgroup/user.slice by an ancestor",
	} {
		if got := v2MissingReason(c, v2host, probe, nil); !strings.HasPrefix(got, want) {
			t.Errorf("v2 host, %s: got %q, want prefix %q", c, got, want)
		}
	}
	probe.RootControllers = []string{"cpu", "memory", "pids"}
	if got := v2MissingReason("io", v2host, probe, nil); !strings.HasPrefix(got, "not available in the unified hierarchy") {
		t.Errorf("v2 host, io absent from root: got %q", got)
	}

	hybrid := classifyCgroups(mustParseMountInfo(t, mountInfoHybrid), "/sys/fs/cgroup")
	for c, want := range map[string]string{
		"memory": "bound to cgroup v1 at /sys/fs/cgroup/memory",
		"io":     "bound to cgroup v1 at /sys/fs/cgroup/blkio",
	} {
		if got := v2MissingReason(c, hybrid, v2Probe{}, nil); got != want {
			t.Errorf("hybrid host, %s: got %q, want %q", c, got, want)
		}
	}
}

func TestParseSeccompStatus(t *testing.T) {
	s, err := parseSeccompStatus([]byte("Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t3\nSpeculation_Store_Bypass:\tthread vulnerable\n"))
	if err != nil || s != (seccompStatus{mode: 2, filters: 3}) {
		t.Errorf("got %+v, %v", s, err)
	}
	s, err = parseSeccompStatus([]byte("Seccomp:\t0\n")) // before Linux 5.9
	if err != nil || s != (seccompStatus{mode: 0, filters: -1}) {
		t.Errorf("got %+v, %v", s, err)
	}
	if _, err := parseSeccompStatus([]byte("Name:\tx\n")); err == nil {
		t.Error("no Seccomp line: no error")
	}
}

func TestParseOSRelease(t *testing.T) {
	for in, want := range map[string]string{
		"NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n": "Debian GNU/Linux 12 (bookworm)",
		"PRETTY_NAME='Alpine Linux v3.20'\n":                                "Alpine Linux v3.20",
		"PRETTY_NAME=Arch\n":                                                "Arch",
		"NAME=x\n":                                                          "",
	} {
		if got := parseOSRelease([]byte(in)); got != want {
			t.Errorf("parseOSRelease(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRuntimeVersion(t *testing.T) {
	out := "runc version 1.5.3\ncommit: v1.5.3-0-gabcdef\nspec: 1.3.0\ngo: go1.26.8\nlibseccomp: 2.5.4\n"
	v, s, err := parseRuntimeVersion([]byte(out))
	if err != nil || v != "1.5.3" || s != "1.3.0" {
		t.Errorf("got %q, %q, %v", v, s, err)
	}
	for _, bad := range []string{"spec: 1.3.0\n", "runc version 1.5.3\n", ""} {
		if _, _, err := parseRuntimeVersion([]byte(bad)); err == nil {
			t.Errorf("parseRuntimeVersion(%q): no error", bad)
		}
	}
}

func TestFileSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := FileSHA256(p)
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; err != nil || got != want {
		t.Errorf("FileSHA256 = %q, %v; want %q", got, err, want)
	}
	if _, err := FileSHA256(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file: no error")
	}
}

// TestProbeRuntimeScript runs ProbeRuntime against stand-in runtimes, so
// the parsing and error paths are tested without a real runc.
func TestProbeRuntimeScript(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeScript(t, good, "echo 'runc version 9.9.9'; echo 'spec: 1.0.2'")
	rt, err := ProbeRuntime(context.Background(), good)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := FileSHA256(good)
	if want := (Runtime{Path: good, Version: "9.9.9", Spec: "1.0.2", SHA256: sum}); *rt != want {
		t.Errorf("got %+v, want %+v", *rt, want)
	}

	bad := filepath.Join(dir, "bad")
	writeScript(t, bad, "echo broken >&2; exit 3")
	if _, err := ProbeRuntime(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("failing runtime: got %v, want an error with its stderr", err)
	}
	if _, err := ProbeRuntime(context.Background(), filepath.Join(dir, "missing")); err == nil {
		t.Error("missing runtime: no error")
	}
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestProbeRuntimePinned probes the real pinned runc named by CUSTODY_RUNC.
func TestProbeRuntimePinned(t *testing.T) {
	path := os.Getenv("CUSTODY_RUNC")
	if path == "" {
		testenv.Missing(t, "the pinned runc in $CUSTODY_RUNC, so ProbeRuntime is NOT tested against it")
	}
	rt, err := ProbeRuntime(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	// The versions pinned in tools/runc/go.mod (github.com/opencontainers/runc)
	// and go.mod (runtime-spec); the binary must be the one built from that pin.
	if rt.Version != "1.5.3" || rt.Spec != "1.3.0" {
		t.Errorf("runc %s, spec %s; want the pinned 1.5.3, spec 1.3.0", rt.Version, rt.Spec)
	}
	if len(rt.SHA256) != 64 {
		t.Errorf("sha256 %q is not a hex digest", rt.SHA256)
	}
	t.Logf("%+v", *rt)
}

func TestProbeCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Probe(ctx, Options{}); err == nil {
		t.Error("Probe with a canceled context: no error")
	}
}

// TestProbeLive probes this host for real. It needs root and creates (and
// removes) cgroups and mounts.
func TestProbeLive(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SKIPPING: the live probe only runs on linux")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, so the live host probe (cgroups, tmpfs, overlay, user namespaces, seccomp) is NOT tested")
	}
	before := mustReadMountInfo(t)
	seccompBefore, err := readSeccompStatus("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if seccompBefore.filters < 0 {
		t.Log("kernel reports no Seccomp_filters; thread filter check is vacuous")
	}
	scratch := t.TempDir()
	opts := Options{ScratchDir: scratch, RuntimePath: os.Getenv("CUSTODY_RUNC")}

	p, err := Probe(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.MarshalIndent(p, "", "  ")
	t.Logf("profile:\n%s", js)

	if p.Kernel == "" || p.Arch != runtime.GOARCH || p.OS != "linux" {
		t.Errorf("kernel %q, arch %q, os %q", p.Kernel, p.Arch, p.OS)
	}
	if _, err := os.Stat("/etc/os-release"); err == nil && p.Distro == "" {
		t.Error("distro empty though /etc/os-release exists")
	}

	// The mode must agree with the mount table.
	layout := classifyCgroups(before, "/sys/fs/cgroup")
	cg := p.Cgroup
	if cg.Mode != layout.Mode {
		t.Errorf("mode %q, mount table says %q", cg.Mode, layout.Mode)
	}
	if layout.Unified != nil && cg.Unified != layout.Unified.MountPoint {
		t.Errorf("unified %q, want %q", cg.Unified, layout.Unified.MountPoint)
	}
	if cg.V2Delegated == nil || cg.V1Usable == nil {
		t.Error("V2Delegated and V1Usable must be non-nil (JSON [])")
	}
	if !slices.IsSorted(cg.V2Delegated) || !slices.IsSorted(cg.V1Usable) {
		t.Error("controller lists not sorted")
	}
	for _, c := range ProductionControllers() {
		_, missing := cg.V2Missing[c]
		if delegated := slices.Contains(cg.V2Delegated, c); delegated == missing {
			t.Errorf("v2 %s: delegated %v, missing %v: want exactly one", c, delegated, missing)
		}
	}
	for _, c := range DevelopmentControllers() {
		_, missing := cg.V1Missing[c]
		usable := slices.Contains(cg.V1Usable, c)
		if usable == missing {
			t.Errorf("v1 %s: usable %v, missing %v: want exactly one", c, usable, missing)
		}
		// Root can create a child of its own cgroup in every v1
		// hierarchy mounted here (memory, pids, cpu, cpuacct on the CI host).
		if h, ok := layout.v1Hierarchy(c); ok && !usable {
			t.Errorf("v1 %s is mounted at %s but not usable: %s", c, h.Mount.MountPoint, cg.V1Missing[c])
		}
	}
	if h, ok := layout.v1Hierarchy("memory"); ok && cg.Mode == CgroupHybrid {
		if r := cg.V2Missing["memory"]; !strings.Contains(r, "cgroup v1 at "+h.Mount.MountPoint) {
			t.Errorf("V2Missing[memory] = %q, want it to say memory is bound to cgroup v1 at %s", r, h.Mount.MountPoint)
		}
	}

	for name, f := range map[string]Fact{"seccomp": p.Seccomp, "userns": p.UserNS, "tmpfs": p.Tmpfs, "overlay": p.Overlay} {
		if !f.OK || f.How == "" {
			t.Errorf("%s: %+v", name, f)
		}
	}
	if opts.RuntimePath != "" && (p.Runtime == nil || p.Runtime.Error != "" || p.Runtime.Version == "") {
		t.Errorf("runtime: %+v", p.Runtime)
	}

	// Nothing left behind: no probe cgroups next to where they were made,
	// no scratch directories, no mounts.
	own, err := readProcCgroup(procSelfCgroup)
	if err != nil {
		t.Fatal(err)
	}
	var parents []string
	if layout.Unified != nil {
		if p, err := unifiedPath(own); err == nil {
			if d, err := cgroupDir(*layout.Unified, p); err == nil {
				parents = append(parents, d)
			}
		}
	}
	for _, h := range layout.V1 {
		if p, err := v1Path(own, h); err == nil {
			if d, err := cgroupDir(h.Mount, p); err == nil {
				parents = append(parents, d)
			}
		}
	}
	if len(parents) == 0 {
		t.Error("found no own cgroup directories to check for leftovers")
	}
	for _, d := range parents {
		left, err := filepath.Glob(filepath.Join(d, probePrefix+"*"))
		if err != nil || len(left) > 0 {
			t.Errorf("leftover probe cgroups in %s: %q %v", d, left, err)
		}
	}
	if ents, err := os.ReadDir(scratch); err != nil || len(ents) > 0 {
		t.Errorf("leftovers in scratch dir %s: %v %v", scratch, ents, err)
	}
	for _, m := range mustReadMountInfo(t) {
		if strings.Contains(m.MountPoint, probePrefix) || within(scratch, m.MountPoint) {
			t.Errorf("leftover mount %s (%s)", m.MountPoint, m.FSType)
		}
	}

	// The seccomp probe's thread must be gone with its filter: no thread
	// may carry more filters than the process had before. Thread exit is
	// asynchronous to the probe's return, so allow it a moment.
	var filtered []string
	for range 100 {
		filtered = filteredThreads(t, seccompBefore.filters)
		if len(filtered) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(filtered) > 0 {
		t.Errorf("threads still carrying the probe's seccomp filter: %v", filtered)
	}
}

// filteredThreads lists this process's threads with more than n seccomp
// filters.
func filteredThreads(t *testing.T, n int) []string {
	t.Helper()
	paths, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		s, err := readSeccompStatus(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.filters > n {
			out = append(out, p)
		}
	}
	return out
}

func mustReadMountInfo(t *testing.T) []mountInfo {
	t.Helper()
	m, err := readMountInfo("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestProbePartialFailure checks that failing sub-probes are recorded in
// the profile rather than aborting the probe.
func TestProbePartialFailure(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	p, err := Probe(context.Background(), Options{ScratchDir: missing, RuntimePath: filepath.Join(missing, "runc")})
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	for name, f := range map[string]Fact{"tmpfs": p.Tmpfs, "overlay": p.Overlay} {
		if f.OK || !strings.Contains(f.Detail, missing) {
			t.Errorf("%s with a missing scratch dir: %+v", name, f)
		}
	}
	if p.Runtime == nil || p.Runtime.Error == "" || p.Runtime.Version != "" {
		t.Errorf("missing runtime: %+v", p.Runtime)
	}
}

// TestIsMountedSpace checks a real mount on a directory whose name has a
// space is found in the kernel's mount table.
func TestIsMountedSpace(t *testing.T) {
	dir := testenv.SpacedMount(t)
	ok, err := isMounted(procSelfMountInfo, dir)
	if err != nil || !ok {
		t.Errorf("isMounted(%q) = %v, %v; want true", dir, ok, err)
	}
}

// TestProbePidfdNetns: on this host (Linux 5.8 or later, as root) the
// probe opens a listener in a child's fresh namespace through its pidfd;
// forced to fail, the fact is disproved with the reason, and the doctor
// warns with the fix.
func TestProbePidfdNetns(t *testing.T) {
	testenv.Root(t)
	if f := probePidfdNetns(context.Background(), ""); !f.OK {
		t.Fatalf("pidfd-netns probe failed here: %+v", f)
	}
	f := probePidfdNetns(context.Background(), "forced")
	if f.OK || !strings.Contains(f.Detail, "forced") {
		t.Fatalf("a forced failure reported %+v", f)
	}
	p := &Profile{PidfdNetns: f}
	gaps := p.FactShortfalls("pidfd-netns")
	if len(gaps) != 1 || gaps[0].Requirement != "platform.pidfd-netns" {
		t.Fatalf("gaps %+v", gaps)
	}
	for _, c := range Diagnose(p, Fact{OK: true}, Expect{}) {
		if c.Name == "pidfd-netns" {
			if c.Verdict != VerdictWarn || !strings.Contains(c.Fix, "5.8") {
				t.Fatalf("doctor check %+v", c)
			}
			return
		}
	}
	t.Fatal("no pidfd-netns check in the doctor's list")
}
