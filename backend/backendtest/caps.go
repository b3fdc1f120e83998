package backendtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/sealed"
	"github.com/custody-dev/custody/internal/testenv"
)

// ControlRootfs names running the workload in the Spec's image (Rootfs, or
// Sealed where claimed): a backend that runs it elsewhere reports it as a
// gap.
const ControlRootfs = "sandbox.rootfs"

// capabilityHonesty: each capability a backend reports is checked by a
// workload that would break it; each one it does not report is refused
// (or, for SealedImages, ignored as the contract says), never half served.
func capabilityHonesty(t *testing.T, f Fixture) {
	t.Run("Stable", func(t *testing.T) {
		// Capabilities are values: asking again changes nothing.
		a, b := f.Backend.Capabilities(), f.Backend.Capabilities()
		if !reflect.DeepEqual(a, b) {
			t.Errorf("Capabilities changed between two calls:\n%+v\n%+v", a, b)
		}
		if !a.RestrictedEgress && len(a.EgressGaps) == 0 {
			t.Logf("RestrictedEgress not claimed, and no egress gap: the backend was not asked to serve it")
		}
		if a.RestrictedEgress && len(a.EgressGaps) != 0 {
			t.Errorf("RestrictedEgress claimed with egress gaps %+v", a.EgressGaps)
		}
	})
	t.Run("UserNamespace", func(t *testing.T) { userNamespace(t, f) })
	t.Run("WritableInputs", func(t *testing.T) { writableInputs(t, f) })
	t.Run("RestrictedEgress", func(t *testing.T) { restrictedEgress(t, f) })
	t.Run("SealedImages", func(t *testing.T) { sealedImages(t, f) })
}

// userNamespace: a backend that claims a user namespace runs its workload
// under a uid map that is not the host's identity map.
func userNamespace(t *testing.T, f Fixture) {
	r := runSh(t, f, "cat /proc/self/uid_map > @OUT@/uid_map")
	r.wantClean(t, "reading the uid map")
	fields := strings.Fields(r.files["uid_map"])
	if len(fields) < 3 {
		t.Fatalf("the workload's uid map %q", r.files["uid_map"])
	}
	identity := len(fields) == 3 && fields[0] == "0" && fields[1] == "0" && fields[2] == "4294967295"
	if !f.Backend.Capabilities().UserNamespace {
		t.Logf("NOT CLAIMED: %s does not claim a user namespace; the workload's uid map is %q", f.Backend.Name(), strings.Join(fields, " "))
		return
	}
	if identity {
		t.Errorf("UserNamespace claimed, yet the workload runs under the host's identity uid map")
	}
	if fields[1] == "0" {
		t.Errorf("UserNamespace claimed, yet the sandbox's root is the host's root: uid map %q", r.files["uid_map"])
	}
}

// writableInputs: a backend that claims writable inputs gives a writable
// copy that the workload changes while the host tree stays unchanged; one
// that does not refuses such a Spec before making anything.
func writableInputs(t *testing.T, f Fixture) {
	src := inputDir(t, "input\n")
	s := shSpec(f, `echo changed > /in/in.txt && echo new > /in/new && cat /in/in.txt /in/new > @OUT@/seen`)
	s.Inputs = []backend.Mount{{Source: src, Target: "/in", Writable: true}}
	if !f.Backend.Capabilities().WritableInputs {
		refusedBeforeCreate(t, f, s, "a writable input, which the backend does not claim")
		return
	}
	r := runSpec(t, f, s, 2*time.Minute)
	r.wantClean(t, "writes to a writable input")
	if r.files["seen"] != "changed\nnew\n" {
		t.Errorf("the writable input in the sandbox: %q (stderr %q)", r.files["seen"], r.stderr)
	}
	if data, err := os.ReadFile(filepath.Join(src, "in.txt")); err != nil || string(data) != "input\n" {
		t.Errorf("the input on the host changed: %q %v", data, err)
	}
	if _, err := os.Lstat(filepath.Join(src, "new")); err == nil {
		t.Error("a write to the writable copy reached the host tree")
	}
}

// refusedBeforeCreate: Prepare refuses s, and nothing of the launch
// exists after.
func refusedBeforeCreate(t *testing.T, f Fixture, s backend.Spec, what string) {
	t.Helper()
	ctx := context.Background()
	id, j := newID(t), newJournalFor(t)
	intents, err := f.Backend.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Intent(intents...); err != nil {
		t.Fatal(err)
	}
	sb, err := f.Backend.Prepare(ctx, id, s, j)
	if err == nil {
		sb.Cleanup(ctx)
		t.Fatalf("Prepare accepted %s", what)
	}
	t.Logf("refused as it should be: %v", err)
	if sb != nil {
		wantVerified(t, "cleanup after the refusal", sb.Cleanup(ctx))
	}
	wantVerified(t, "absence after the refusal", f.Backend.VerifyAbsent(id, j.recorded()))
	j.check(t)
}

// restrictedEgress: a backend that claims restricted egress lets the
// workload reach the listener Attach opens in its namespace; one that does
// not refuses a Spec with Egress before making anything.
func restrictedEgress(t *testing.T, f Fixture) {
	var served atomic.Int32
	s := shSpec(f, `nc 127.0.0.1 4711 < /dev/null > @OUT@/reply`)
	s.Egress = &backend.Egress{
		Allow: []string{"suite.invalid:443"},
		Env:   []string{"SUITE_PROXY=127.0.0.1:4711"},
		Attach: func(ctx context.Context, listen func(addr string) (net.Listener, error)) error {
			l, err := listen("127.0.0.1:4711")
			if err != nil {
				return err
			}
			go func() {
				defer l.Close()
				c, err := l.Accept()
				if err != nil {
					return
				}
				served.Add(1)
				fmt.Fprintln(c, "through the attached listener")
				c.Close()
			}()
			return nil
		},
	}
	if !f.Backend.Capabilities().RestrictedEgress {
		refusedBeforeCreate(t, f, s, "restricted egress, which the backend does not claim")
		return
	}
	r := runSpec(t, f, s, 2*time.Minute)
	r.wantClean(t, "the workload's connection to the attached listener")
	if r.files["reply"] != "through the attached listener\n" || served.Load() != 1 {
		t.Errorf("the workload's reply %q, %d connection(s) served", r.files["reply"], served.Load())
	}
}

// sealedImages: a backend that claims sealed images runs the sealed tree
// when given one, and refuses a seal whose identity is not the file's; one
// that does not claim them runs Rootfs, ignoring the seal.
func sealedImages(t *testing.T, f Fixture) {
	if !claims(t, f, ControlRootfs) {
		return
	}
	base := f.Spec("/bin/true")
	dir, seal := SealedCopy(t, base.Rootfs)
	s := f.Spec("/bin/cat", "/marker")
	s.Rootfs, s.Sealed = dir, seal
	r := runSpec(t, f, s, 2*time.Minute)
	r.wantClean(t, "cat /marker")
	if !f.Backend.Capabilities().SealedImages {
		if r.stdout != "dir\n" {
			t.Errorf("SealedImages not claimed, yet the launch ran %q, want the rootfs directory's %q", r.stdout, "dir\n")
		}
		return
	}
	if r.stdout != "sealed\n" {
		t.Errorf("SealedImages claimed, yet the launch ran %q, want the sealed tree's %q", r.stdout, "sealed\n")
	}
	// The same file under another identity is not the verified image.
	forged := *seal
	id, err := sealed.Parse(seal.Identity)
	if err != nil {
		t.Fatal(err)
	}
	id.Size++
	forged.Identity = id.String()
	s.Sealed = &forged
	ctx := context.Background()
	jid, j := newID(t), newJournalFor(t)
	intents, err := f.Backend.Intents(jid)
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Intent(intents...)
	sb, err := f.Backend.Prepare(ctx, jid, s, j)
	if err == nil {
		ex, rerr := sb.Run(ctx, time.Minute, backend.IO{})
		if rerr == nil && ex.Code == 0 {
			t.Errorf("a seal whose identity is not the file's was launched: %+v", ex)
		}
	}
	if sb != nil {
		wantVerified(t, "cleanup after the forged seal", sb.Cleanup(ctx))
	}
}

// SealedCopy seals a copy of rootfs holding /marker "sealed" as an erofs
// file, and returns it with the copy, whose /marker then says "dir": a
// launch shows which it ran.
func SealedCopy(t *testing.T, rootfs string) (string, *backend.SealedImage) {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		testenv.Missing(t, "mkfs.erofs (erofs-utils): "+err.Error())
	}
	work := t.TempDir()
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(work, "rootfs")
	if out, err := exec.Command("cp", "-a", rootfs, src).CombinedOutput(); err != nil {
		t.Fatalf("copy the image: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(src, "marker"), []byte("sealed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(work, "rootfs.erofs")
	if out, err := exec.Command(mkfs, "--quiet", "-x-1", "--preserve-mtime", file, src).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.erofs: %v %s", err, out)
	}
	id, _, err := sealed.Seal(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "marker"), []byte("dir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return src, &backend.SealedImage{File: file, Identity: id.String()}
}

// deniedEgress: with no Egress the workload reaches nothing outside its
// sandbox. A listener on every host address is reachable from the host
// (the legitimate control) and from the workload not at all.
func deniedEgress(t *testing.T, f Fixture) {
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			fmt.Fprintln(c, "REACHED-HOST")
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	var addrs []string
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ifs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			addrs = append(addrs, n.IP.String())
		}
	}
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(a, fmt.Sprint(port)), 5*time.Second)
		if err != nil {
			t.Fatalf("the control: the host cannot reach its own listener at %s: %v", a, err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line != "REACHED-HOST\n" {
			t.Fatalf("the control at %s read %q", a, line)
		}
	}
	control := accepted.Load()
	if !claims(t, f, ControlDeniedEgress) {
		return
	}
	var script strings.Builder
	// Without nc the probe would reach nothing and prove nothing.
	script.WriteString("command -v nc >/dev/null || { echo NO-NC; exit 0; }; ")
	for _, a := range addrs {
		fmt.Fprintf(&script, "nc -w 3 %s %d < /dev/null; ", a, port)
	}
	script.WriteString("exit 0")
	r := runSh(t, f, script.String())
	if strings.Contains(r.stdout, "NO-NC") {
		t.Fatalf("the image has no nc: the egress probe cannot run")
	}
	if strings.Contains(r.stdout, "REACHED-HOST") || accepted.Load() != control {
		t.Errorf("denied egress reached the host's listener (%d connection(s)) at one of %v: %q", accepted.Load()-control, addrs, r.stdout)
	}
}
