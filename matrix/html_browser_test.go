package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
)

// suiteChecks is the conformance suite's check list (names and cases as
// conformance/checks.go reports them), so the page is judged at its real
// width, not at the two checks per family of fullChecks.
func suiteChecks(failing ...string) []Check {
	names := map[string][]string{
		"input":       {"read-input", "+write-input-refused", "+changed-after-issue-refused", "+rootfs-read-only"},
		"output":      {"output-kept-by-digest", "+output-bound-enforced"},
		"environment": {"declared-variable-visible", "+ambient-variables-absent", "minimal-devices-work", "+host-devices-absent"},
		"egress":      {"loopback-works", "+host-listener-unreachable"},
		"budgets": {"memory-within-budget", "+memory-hog-oom-killed", "pids-within-budget", "+fork-bomb-capped", "cpu-quota-applied",
			"+cpu-burn-throttled", "tmp-within-budget", "+tmp-bound-enforced", "scratch-within-budget", "+writable-mounts-bounded",
			"wall-time-within-budget", "+wall-time-exceeded-killed"},
		"cleanup":   {"detached-child-runs", "+detached-child-gone-after-exit", "+detached-child-gone-after-timeout"},
		"evidence":  {"genuine-receipt-verifies", "+tampered-receipt-rejected"},
		"isolation": {"ordinary-operations-work", "+privileged-syscalls-refused", "+no-capabilities", "+own-namespaces"},
	}
	var out []Check
	for _, f := range RequiredFamilies {
		for _, n := range names[f] {
			c := Check{Family: f, Name: strings.TrimPrefix(n, "+"), Case: CaseLegitimate, Passed: true,
				Detail: "exit 0 in 212ms; the probe read /in/data.txt and wrote /out/result.txt, kept by digest sha256:" + strings.Repeat("5e", 32)}
			if strings.HasPrefix(n, "+") {
				c.Case, c.Detail = CaseRefusal, "refused as it should be: EROFS on open(/in/data.txt, O_WRONLY); the run's receipt records exit 1 and status failed"
			}
			for _, bad := range failing {
				if bad == f+"/"+c.Name {
					c.Passed, c.Detail = false, "NOT refused: the workload's write to /in/data.txt succeeded (want EROFS, EACCES or EPERM); run 0123456789abcdef"
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// browserRows is a matrix dir as a release engineer meets it: this host's
// development row, a production row inside the cgroup-v2 guest, a vm row
// with checks not applicable, a failed and a stale row, one signed by an
// untrusted key and one that does not decode, plus a disabled backend.
func browserRows(t *testing.T, now time.Time) ([]Entry, *Disabled) {
	t.Helper()
	k := newKey(t)
	host := testPlatform()
	host.Kernel, host.Cgroup = "6.1.0-41-cloud-amd64", PlatformCgroup{Mode: "hybrid", V2Delegated: []string{}, V1Usable: []string{"blkio", "cpu", "memory", "pids"}}
	guest := testPlatform()
	vm := testPlatform()
	vm.Backend, vm.Runtime.Version, vm.Runtime.SHA256 = "vm", "qemu-system-x86_64 7.2.19; microvm; accel tcg; kernel 6.1.0-41-amd64", strings.Repeat("9f", 32)
	docker := testPlatform()
	docker.Backend, docker.Runtime.Version = "docker", "dockerd 20.10.24+dfsg1 (isolated)"
	sign := func(p Platform, tier string, at time.Time, checks []Check, na []NotApplicable) *Row {
		return signInfo(t, k, p, Info{Tier: tier, CustodyVersion: "0.9.0-148-g8afa418", SuiteVersion: "7", RunnerID: k.ID(),
			QualifiedAt: at, Checks: checks, NotApplicable: na})
	}
	var vmChecks []Check
	for _, c := range suiteChecks() {
		if c.Name != "minimal-devices-work" && c.Name != "host-devices-absent" {
			vmChecks = append(vmChecks, c)
		}
	}
	vmNA := []NotApplicable{
		{Family: "environment", Name: "minimal-devices-work", Reason: "the boundary is the guest kernel under QEMU, not a container on the host kernel: the guest's /dev holds its own kernel's nodes"},
		{Family: "environment", Name: "host-devices-absent", Reason: "the boundary is the guest kernel under QEMU: a device node the guest's root makes names a device of the guest kernel"},
	}
	rows := map[string]*Row{
		"linux-amd64-oci-development.json":           sign(host, TierDevelopment, now.Add(-2*time.Hour), suiteChecks(), nil),
		"linux-amd64-oci-production.json":            sign(guest, TierProduction, now.Add(-90*time.Minute), suiteChecks(), nil),
		"linux-amd64-oci-production-2026-05-01.json": sign(guest, TierProduction, now.Add(-40*24*time.Hour), suiteChecks(), nil),
		"linux-amd64-vm-production.json":             sign(vm, TierProduction, now.Add(-3*time.Hour), vmChecks, vmNA),
		"linux-amd64-docker.json":                    sign(docker, TierDevelopment, now.Add(-5*time.Hour), suiteChecks("input/write-input-refused", "budgets/fork-bomb-capped"), nil),
		"linux-amd64-oci-other-runner.json":          signRow(t, newKey(t), host, TierDevelopment, now.Add(-time.Hour), suiteChecks()),
	}
	dir := t.TempDir()
	for name, row := range rows {
		data, err := json.Marshal(row)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "truncated.json"), []byte(`{"payloadType":`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DisabledFile), []byte("docker isolated engine under review (issue 14)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadGateDir(t, dir, []*keys.Verifier{k.Verifier()})
}

// measureScript records, after layout, the page's width and its header
// row's height, first as loaded and then with every <details> open, into
// the DOM that --dump-dom prints. It is added to a copy of the page only:
// the page itself has no script.
const measureScript = `<script>
function measure(){const d=document.documentElement,h=document.querySelector('table.m thead tr').getBoundingClientRect();
return {scrollWidth:d.scrollWidth,clientWidth:d.clientWidth,innerWidth:window.innerWidth,headerHeight:h.height,tableTop:h.top};}
const closed=measure();document.querySelectorAll('details').forEach(e=>{e.open=true});const open=measure();
const m=document.createElement('pre');m.id='measure';m.textContent='MEASURE'+JSON.stringify({closed:closed,open:open})+'END';document.body.appendChild(m);
</script></body>`

type pageMeasure struct {
	ScrollWidth, ClientWidth, InnerWidth int
	HeaderHeight, TableTop               float64
}

// runChromium runs headless Chromium on a file with a fresh profile and no
// network beyond what a file: page needs; it returns stdout.
func runChromium(t *testing.T, chromium string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,800"}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

var measureRE = regexp.MustCompile(`MEASURE(\{.*?\})END`)

// TestMatrixPageInChromium: the matrix page, with the rows a release
// engineer meets (current, stale, failed, disabled, untrusted, unreadable,
// n/a), fits a 1280x800 window in headless Chromium with no horizontal
// scroll, collapsed and with every detail open, and its header row is one
// line high; the screenshot is a 1280x800 image with the table on it.
// CUSTODY_MATRIX_SCREENSHOT=FILE keeps the screenshot for a person to look at.
func TestMatrixPageInChromium(t *testing.T) {
	chromium := testenv.Chromium(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	entries, disabled := browserRows(t, now)
	var html bytes.Buffer
	if err := WriteHTML(&html, entries, HTMLOptions{Now: now, Disabled: disabled}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html.String(), "<script") {
		t.Fatal("the matrix page carries a script; it must read without one")
	}
	dir := t.TempDir()
	pagePath := filepath.Join(dir, "index.html")
	if err := os.WriteFile(pagePath, html.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	measured := strings.Replace(html.String(), "</body>", measureScript, 1)
	measurePath := filepath.Join(dir, "measure.html")
	if err := os.WriteFile(measurePath, []byte(measured), 0o644); err != nil {
		t.Fatal(err)
	}

	dom := runChromium(t, chromium, "--dump-dom", "file://"+measurePath)
	m := measureRE.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("chromium's DOM has no measurement:\n%.2000s", dom)
	}
	var got struct{ Closed, Open pageMeasure }
	if err := json.Unmarshal(m[1], &got); err != nil {
		t.Fatalf("measurement %s: %v", m[1], err)
	}
	t.Logf("collapsed %+v; every detail open %+v", got.Closed, got.Open)
	if got.Closed.InnerWidth != 1280 {
		t.Fatalf("the window is %d px wide, not 1280: the measurement would mean nothing", got.Closed.InnerWidth)
	}
	for name, pm := range map[string]pageMeasure{"collapsed": got.Closed, "with every detail open": got.Open} {
		if pm.ScrollWidth > 1280 || pm.ScrollWidth > pm.ClientWidth {
			t.Errorf("%s the page scrolls sideways: scrollWidth %d > clientWidth %d", name, pm.ScrollWidth, pm.ClientWidth)
		}
		if pm.HeaderHeight > 40 {
			t.Errorf("%s the header row is %.0f px tall; one line is about 25", name, pm.HeaderHeight)
		}
	}
	if got.Closed.TableTop > 200 {
		t.Errorf("the table starts %.0f px down the page; the header text above it is too long", got.Closed.TableTop)
	}

	shot := filepath.Join(dir, "matrix.png")
	runChromium(t, chromium, "--screenshot="+shot, "file://"+pagePath)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
		t.Fatalf("screenshot is %dx%d, want 1280x800", b.Dx(), b.Dy())
	}
	// The pass and fail cells' colours are on screen: the table rendered.
	colours := map[[3]uint32]bool{}
	for y := 0; y < 800; y += 4 {
		for x := 0; x < 1280; x += 4 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, b >> 8}] = true
		}
	}
	for name, c := range map[string][3]uint32{"pass": {0xdc, 0xf3, 0xd5}, "fail": {0xf6, 0xd2, 0xd2}} {
		if !colours[c] {
			t.Errorf("the screenshot shows no %s cell (colour %02x%02x%02x)", name, c[0], c[1], c[2])
		}
	}
	if keep := os.Getenv("CUSTODY_MATRIX_SCREENSHOT"); keep != "" {
		src, err := os.Open(shot)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		dst, err := os.Create(keep)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
