package probe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the probe binary when the
// probe's own fork tests re-execute it (-noop, -hold).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-noop":
			os.Exit(0)
		case "-hold":
			d, _ := time.ParseDuration(os.Args[2])
			time.Sleep(d)
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

func TestParseStatus(t *testing.T) {
	st := ParseStatus([]byte("Name:\tcat\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t00000000a80425fb\n" +
		"CapBnd:\t00000000a80425fb\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n"))
	want := ProcStatus{CapInh: "0000000000000000", CapPrm: "0000000000000000", CapEff: "00000000a80425fb",
		CapBnd: "00000000a80425fb", CapAmb: "0000000000000000", NoNewPrivs: 1, Seccomp: 2, SeccompFilters: 3}
	if st != want {
		t.Fatalf("ParseStatus = %+v, want %+v", st, want)
	}
	if st := ParseStatus([]byte("Name: x\n")); st.NoNewPrivs != -1 || st.Seccomp != -1 || st.SeccompFilters != -1 {
		t.Fatalf("missing fields must read -1: %+v", st)
	}
}

func TestParseMountInfo(t *testing.T) {
	data := `71 47 0:39 / / ro,nosuid,nodev,relatime - overlay overlay rw,lowerdir=/a,upperdir=/b
90 71 0:41 / /out rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=1024k
91 74 0:6 /null /dev/null rw,relatime shared:2 master:1 - devtmpfs devtmpfs rw
92 71 0:50 / /in/with\040space rw,relatime - tmpfs tmpfs ro,size=4k
garbage line
`
	ms, bad := ParseMountInfo([]byte(data))
	if bad != 1 || len(ms) != 4 {
		t.Fatalf("got %d mounts, %d bad: %+v", len(ms), bad, ms)
	}
	if !ms[0].ReadOnly || ms[0].FSType != "overlay" || ms[0].Target != "/" {
		t.Errorf("root mount = %+v", ms[0])
	}
	if ms[1].ReadOnly || ms[1].SuperOptions != "rw,size=1024k" {
		t.Errorf("/out = %+v", ms[1])
	}
	if ms[2].Target != "/dev/null" || ms[2].FSType != "devtmpfs" {
		t.Errorf("optional fields mis-parsed: %+v", ms[2])
	}
	if ms[3].Target != "/in/with space" || !ms[3].ReadOnly {
		t.Errorf("escaped target or superblock ro mis-parsed: %+v", ms[3])
	}
}

func TestParseNetDevAndIDMap(t *testing.T) {
	dev := "Inter-|   Receive  |  Transmit\n face |bytes packets|bytes\n    lo:       0 0 0\n  eth0: 1 2 3\n"
	if got := ParseNetDev([]byte(dev)); !slices.Equal(got, []string{"eth0", "lo"}) {
		t.Fatalf("ParseNetDev = %v", got)
	}
	if got := ParseIDMap([]byte("         0 1000000000      65536\n")); !slices.Equal(got, []string{"0 1000000000 65536"}) {
		t.Fatalf("ParseIDMap = %v", got)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4Ki": 4096, "4Mi": 4 << 20, "1G": 1 << 30, "2MiB": 2 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5Mi", "x", "99999999999999999999"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded", in)
		}
	}
}

func TestErrnoName(t *testing.T) {
	_, err := os.Open(filepath.Join(t.TempDir(), "missing"))
	if got := ErrnoName(err); got != "ENOENT" {
		t.Fatalf("ErrnoName(%v) = %q", err, got)
	}
	if ErrnoName(nil) != "" {
		t.Fatal("ErrnoName(nil) is not empty")
	}
}

// TestCollect runs the harmless attempts on the host. -syscalls is left
// out on purpose: as root on a host the privileged attempts would succeed.
func TestCollect(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the probe observes Linux only")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Collect(context.Background(), Options{
		TryWrite: []string{dir, file, filepath.Join(dir, "new")},
		TryRead:  []string{file, filepath.Join(dir, "missing")},
		Loopback: true,
		Hash:     []string{file},
		Ordinary: true,
		Alloc:    4 << 20,
		Spawn:    3,
		Burn:     50 * time.Millisecond,
		Fills:    []Fill{{Path: filepath.Join(dir, "fill"), Bytes: 100 << 10}},
		Self:     self,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Schema != Schema || rep.PID != os.Getpid() || len(rep.Namespaces) == 0 || len(rep.Mounts) == 0 || len(rep.Rlimits) == 0 {
		t.Fatalf("observations missing: %+v", rep)
	}
	for _, w := range rep.Writes {
		if !w.OK {
			t.Errorf("write %s: %s", w.Name, w.Error)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "hello\n" {
		t.Fatalf("trying to write an existing file changed it: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Fatal("the created probe file was not removed")
	}
	if !rep.Reads[0].OK || rep.Reads[1].OK || rep.Reads[1].Errno != "ENOENT" {
		t.Errorf("reads = %+v", rep.Reads)
	}
	sum := sha256.Sum256([]byte("hello\n"))
	if rep.Hashes[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("hash = %+v", rep.Hashes[0])
	}
	if rep.Loopback == nil || !rep.Loopback.OK {
		t.Errorf("loopback = %+v", rep.Loopback)
	}
	for _, a := range rep.Ordinary {
		if !a.OK {
			t.Errorf("ordinary %s: %s", a.Name, a.Error)
		}
	}
	if rep.Alloc.Touched != 4<<20 || rep.Spawn.Started != 3 || rep.Burn.Threads < 1 || rep.Fills[0].Written != 100<<10 {
		t.Errorf("alloc %+v spawn %+v burn %+v fill %+v", rep.Alloc, rep.Spawn, rep.Burn, rep.Fills)
	}
	if rep.Syscalls != nil {
		t.Error("privileged attempts were made without -syscalls")
	}
	for _, n := range rep.Env {
		if strings.Contains(n, "=") {
			t.Fatalf("an environment value leaked into the report: %q", n)
		}
	}
}

// TestFillMounts: each distinct mount target is tried once, at its
// topmost mount; a directory gets the asked bytes and is left as it was;
// a mount on a file is skipped.
func TestFillMounts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "node")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	recs := []mountRecord{
		{Mount: Mount{Target: dir, FSType: "tmpfs", ReadOnly: true}},
		{Mount: Mount{Target: dir, FSType: "tmpfs"}},
		{Mount: Mount{Target: file, FSType: "devtmpfs"}},
	}
	r := &Report{}
	got := r.fillMounts(recs, 200<<10)
	if len(got) != 2 || got[0].Target != dir || got[0].ReadOnly || got[0].Written != 200<<10 || got[0].Errno != "" || got[0].Files != 1 {
		t.Fatalf("fill of %s: %+v", dir, got)
	}
	if got[1].Skipped == "" || got[1].Written != 0 {
		t.Fatalf("a file mount must be skipped: %+v", got[1])
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || len(r.Problems) > 0 {
		t.Fatalf("the fill left %v behind (problems %v)", ents, r.Problems)
	}
}
