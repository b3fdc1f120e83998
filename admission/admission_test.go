package admission

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/request"

	"golang.org/x/sys/unix"
)

const img = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func hybridProfile() *platform.Profile {
	ok := platform.Fact{OK: true, How: "test"}
	return &platform.Profile{
		Cgroup: platform.Cgroup{
			Mode:        platform.CgroupHybrid,
			V2Delegated: []string{},
			V2Missing: map[string]string{
				"memory": "bound to cgroup v1 at /sys/fs/cgroup/memory", "pids": "bound to cgroup v1 at /sys/fs/cgroup/pids",
				"cpu": "bound to cgroup v1 at /sys/fs/cgroup/cpu", "io": "bound to cgroup v1 at /sys/fs/cgroup/blkio",
			},
			V1Usable: []string{"cpu", "cpuacct", "memory", "pids"},
		},
		Seccomp: ok, UserNS: ok, Tmpfs: ok, Overlay: ok,
	}
}

// capsOf is what a cgroup-enforcing backend (oci) claims on a host with
// this profile.
func capsOf(p *platform.Profile) *backend.Capabilities {
	return &backend.Capabilities{
		Tiers: map[string][]backend.Gap{
			platform.TierProduction:  partial.Gaps(p.TierShortfalls(platform.TierProduction)),
			platform.TierDevelopment: partial.Gaps(p.TierShortfalls(platform.TierDevelopment)),
		},
		Controls: partial.Gaps(p.FactShortfalls("seccomp", "tmpfs", "overlay")),
	}
}

func v2Profile() *platform.Profile {
	p := hybridProfile()
	p.Cgroup = platform.Cgroup{Mode: platform.CgroupV2, V2Delegated: []string{"cpu", "io", "memory", "pids"}}
	return p
}

func pol() *policy.Policy {
	return &policy.Policy{
		APIVersion: policy.APIVersion, Kind: "Policy",
		Images: []policy.Image{{Digest: img}},
		Ceilings: policy.Ceilings{Memory: 256 << 20, Pids: 100, CPU: 2, WallTime: quantity.Duration(time.Minute),
			OutputBytes: 64 << 20, TmpBytes: 32 << 20, InputBytes: 1 << 30},
		Defaults: policy.Defaults{CPU: 1, OutputBytes: 16 << 20, TmpBytes: 8 << 20},
		Tiers:    policy.Tiers{Development: true},
	}
}

func req(tier request.Tier) *request.Phase {
	return &request.Phase{
		APIVersion: request.APIVersion, Kind: "Phase", Name: "t", Stage: request.StageBuild, Tier: tier, Image: img,
		Command: []string{"/bin/true"}, Output: request.Output{Path: "/out"},
		Resources: request.Resources{Memory: 64 << 20, Pids: 10, WallTime: quantity.Duration(time.Second)},
	}
}

func refusal(t *testing.T, err error) []Check {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want *RefusedError", err)
	}
	return re.Checks
}

func codes(cs []Check) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Requirement+"="+c.Code)
	}
	return strings.Join(s, " ")
}

func TestDevelopmentAdmittedAndLabelled(t *testing.T) {
	p, err := Admit(req(request.TierDevelopment), pol(), Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Unqualified || p.Tier != request.TierDevelopment {
		t.Fatalf("plan tier %s unqualified=%v", p.Tier, p.Unqualified)
	}
	// Open choices are the operator's defaults and are recorded as choices.
	if p.CPU != 1 || p.OutputBytes != 16<<20 || p.TmpBytes != 8<<20 {
		t.Fatalf("open choices = cpu %g out %d tmp %d", p.CPU, p.OutputBytes, p.TmpBytes)
	}
	chosen := 0
	for _, c := range p.Checks {
		if c.Verdict == Chosen {
			chosen++
		}
	}
	// cpu, output bytes, tmp, output files, and with no image facts the
	// default PATH and user.
	if chosen != 6 {
		t.Fatalf("want 6 recorded choices, got %d: %s", chosen, codes(p.Checks))
	}
}

func TestProductionRefusedOnHybrid(t *testing.T) {
	_, err := Admit(req(request.TierProduction), pol(), Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true})
	cs := refusal(t, err)
	if len(cs) != 4 {
		t.Fatalf("want one refusal per missing controller, got %s", codes(cs))
	}
	for _, c := range cs {
		if c.Verdict != Unsupported || c.Code != "cgroup-controller-missing" || !strings.Contains(c.Detail, "cgroup v1") || c.Fix == "" {
			t.Errorf("check %+v", c)
		}
	}
}

func TestProductionAdmittedOnDelegatedV2(t *testing.T) {
	p, err := Admit(req(request.TierProduction), pol(), Facts{Capabilities: capsOf(v2Profile()), ImagePresent: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Unqualified {
		t.Fatal("production plan labelled unqualified")
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*request.Phase, *policy.Policy, *Facts, *platform.Profile)
		want string
		verd Verdict
	}{
		{"development disabled", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			p.Tiers.Development = false
		}, "tier.development=tier-disabled", NotGranted},
		{"image not allowed", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) { p.Images = nil }, "image=image-not-allowed", NotGranted},
		{"image not imported", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) { f.ImagePresent = false }, "image=image-not-imported", Unsupported},
		{"memory over ceiling", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			r.Resources.Memory = 1 << 30
		}, "resources.memory=ceiling-exceeded", NotGranted},
		{"pids over ceiling", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) { r.Resources.Pids = 1000 }, "resources.pids=ceiling-exceeded", NotGranted},
		{"wall over ceiling", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			r.Resources.WallTime = quantity.Duration(time.Hour)
		}, "resources.wallTime=ceiling-exceeded", NotGranted},
		{"cpu over ceiling", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) { r.Resources.CPU = 8 }, "resources.cpu=ceiling-exceeded", NotGranted},
		{"output over ceiling", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			r.Output.MaxBytes = 1 << 30
		}, "output.maxBytes=ceiling-exceeded", NotGranted},
		{"tmp over ceiling", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			r.Tmp = &request.Tmp{MaxBytes: 1 << 30}
		}, "tmp.maxBytes=ceiling-exceeded", NotGranted},
		{"memory missing", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) { r.Resources.Memory = 0 }, "resources.memory=budget-missing", NotGranted},
		{"no seccomp", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			prof.Seccomp = platform.Fact{}
		}, "platform.seccomp=seccomp-unavailable", Unsupported},
		{"no tmpfs bound", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			prof.Tmpfs = platform.Fact{}
		}, "platform.tmpfs=tmpfs-unavailable", Unsupported},
		{"no v1 memory", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			prof.Cgroup.V1Usable = []string{"cpu", "cpuacct", "pids"}
		}, "tier.development.cgroup.memory=cgroup-controller-missing", Unsupported},
		{"network", func(r *request.Phase, p *policy.Policy, f *Facts, prof *platform.Profile) {
			r.Network = request.NetworkRequest{Mode: "open"}
		}, "network=network-unsupported", Unsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, p, f, prof := req(request.TierDevelopment), pol(), Facts{ImagePresent: true}, hybridProfile()
			c.mod(r, p, &f, prof)
			f.Capabilities = capsOf(prof)
			_, err := Admit(r, p, f)
			cs := refusal(t, err)
			found := false
			for _, ch := range cs {
				if ch.Requirement+"="+ch.Code == c.want {
					found = true
					if ch.Verdict != c.verd || ch.Detail == "" || ch.Fix == "" {
						t.Errorf("check %+v: want verdict %s with detail and fix", ch, c.verd)
					}
				}
			}
			if !found {
				t.Fatalf("refusal %s does not include %s", codes(cs), c.want)
			}
		})
	}
}

func TestNothingFailsOpen(t *testing.T) {
	for name, f := range map[string]func() error{
		"nil policy": func() error {
			_, err := Admit(req(request.TierDevelopment), nil, Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true})
			return err
		},
		"nil profile": func() error {
			_, err := Admit(req(request.TierDevelopment), pol(), Facts{ImagePresent: true})
			return err
		},
		"nil request": func() error { _, err := Admit(nil, pol(), Facts{Capabilities: capsOf(hybridProfile())}); return err },
	} {
		if cs := refusal(t, f()); len(cs) == 0 {
			t.Errorf("%s: no refusal", name)
		}
	}
}

// Inputs are admitted only below an operator input root; without roots no
// input is granted, and the plan carries the root the snapshot walks from.
func TestInputRoots(t *testing.T) {
	r := req(request.TierDevelopment)
	r.Inputs = []request.Input{{Source: "/srv/in/src", Target: "/in"}}
	p := pol()
	if _, err := Admit(r, p, Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true}); err == nil {
		t.Fatal("an input was admitted by a policy without inputRoots")
	} else if cs := refusal(t, err); len(cs) != 1 || cs[0].Code != "input-outside-roots" || cs[0].Requirement != "inputs[0].source" {
		t.Fatalf("refusal %+v", cs)
	}
	p.InputRoots = []string{"/srv/other"}
	if _, err := Admit(r, p, Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true}); err == nil {
		t.Fatal("an input outside the roots was admitted")
	}
	p.InputRoots = []string{"/srv/other", "/srv/in"}
	plan, err := Admit(r, p, Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Inputs) != 1 || plan.Inputs[0] != (Input{Source: "/srv/in/src", Target: "/in", Root: "/srv/in"}) {
		t.Fatalf("plan inputs %+v", plan.Inputs)
	}
}

// A retained output named by digest is the runner's own content, not a
// host path: it is admitted without an input root (the runner resolves it
// from its output store), while a host input beside it still needs one.
func TestOutputInputs(t *testing.T) {
	src := request.OutputSource("sha256:" + strings.Repeat("ab", 32))
	r := req(request.TierDevelopment)
	r.Inputs = []request.Input{{Source: src, Target: "/prev"}}
	plan, err := Admit(r, pol(), Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Inputs) != 1 || plan.Inputs[0] != (Input{Source: src, Target: "/prev"}) {
		t.Fatalf("plan inputs %+v", plan.Inputs)
	}
	if d, ok := plan.Inputs[0].OutputDigest(); !ok || d != strings.TrimPrefix(src, request.OutputSourcePrefix) {
		t.Fatalf("OutputDigest %q %v", d, ok)
	}
	r.Inputs = append(r.Inputs, request.Input{Source: "/srv/in/src", Target: "/in"})
	if _, err := Admit(r, pol(), Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true}); err == nil {
		t.Fatal("a host input beside an output was admitted without input roots")
	} else if cs := refusal(t, err); len(cs) != 1 || cs[0].Requirement != "inputs[1].source" {
		t.Fatalf("refusal %+v", cs)
	}
}

// The output entry bound is an open choice within the policy's ceiling,
// and request and policy agree on its largest value.
func TestOutputFiles(t *testing.T) {
	r := req(request.TierDevelopment)
	plan, err := Admit(r, pol(), Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true})
	if err != nil || plan.OutputFiles != policy.DefaultOutputFiles {
		t.Fatalf("default: %v %+v", err, plan)
	}
	small := int64(10)
	p := pol()
	p.Ceilings.OutputFiles = &small
	if plan, err = Admit(r, p, Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true}); err != nil || plan.OutputFiles != 10 {
		t.Fatalf("default under a ceiling of 10: %v %+v", err, plan)
	}
	r.Output.MaxFiles = 11
	if _, err := Admit(r, p, Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true}); err == nil {
		t.Fatal("11 output files admitted under a ceiling of 10")
	}
	r.Output.MaxFiles = policy.MaxOutputFiles
	if err := r.Validate(); err != nil {
		t.Errorf("request refuses policy.MaxOutputFiles: %v", err)
	}
	r.Output.MaxFiles = policy.MaxOutputFiles + 1
	if err := r.Validate(); err == nil {
		t.Error("request accepts more than policy.MaxOutputFiles")
	}
}

// A backend that claims nothing (no tiers, e.g. one built without a
// platform profile) admits nothing: nothing fails open.
func TestNoCapabilitiesRefuses(t *testing.T) {
	for _, tier := range []request.Tier{request.TierDevelopment, request.TierProduction} {
		_, err := Admit(req(tier), pol(), Facts{Capabilities: &backend.Capabilities{}, ImagePresent: true})
		if cs := refusal(t, err); len(cs) == 0 || cs[0].Code != "tier-unknown" {
			t.Errorf("tier %s with no capabilities: %+v", tier, cs)
		}
	}
}

// tree is a small image tree: make in /usr/bin, a /src directory, a file
// where a directory might be, and a builder user.
func tree() fstest.MapFS {
	return fstest.MapFS{
		"usr/bin/make": {Data: []byte("x"), Mode: 0o755},
		"bin/sh":       {Data: []byte("x"), Mode: 0o755},
		"bin/true":     {Data: []byte("x"), Mode: 0o755},
		"etc/notes":    {Data: []byte("x"), Mode: 0o644},
		"src":          {Mode: fs.ModeDir | 0o755},
		"etc/passwd":   {Data: []byte("root:x:0:0:root:/root:/bin/sh\n# comment\nbuilder:x:1000:1001::/home/builder:/bin/sh\n")},
		"etc/group":    {Data: []byte("root:x:0:\nstaff:x:50:builder\n")},
	}
}

func imageFacts(cfg ImageConfig) Facts {
	return Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true, Image: &ImageFacts{Config: cfg, Tree: tree()}}
}

// A phase that declares no command, workdir or user gets the image's; one
// that declares them overrides the image's.
func TestImageConfigDefaults(t *testing.T) {
	cfg := ImageConfig{Env: []string{"PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8"}, WorkingDir: "/src", User: "builder",
		Entrypoint: []string{"make"}, Cmd: []string{"test"}}
	r := req(request.TierDevelopment)
	r.Command = nil
	p, err := Admit(r, pol(), imageFacts(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Command, []string{"/usr/bin/make", "test"}) || p.Workdir != "/src" ||
		p.Env["PATH"] != "/usr/local/bin:/usr/bin" || p.Env["LANG"] != "C.UTF-8" ||
		*p.User != (User{UID: 1000, GID: 1001, Name: "builder"}) {
		t.Fatalf("plan = command %q workdir %q env %v user %+v", p.Command, p.Workdir, p.Env, p.User)
	}
	if !strings.Contains(codes(p.Checks), "command=image-command") || !strings.Contains(codes(p.Checks), "workdir=image-workdir") {
		t.Errorf("the image's choices are not recorded: %s", codes(p.Checks))
	}

	r = req(request.TierDevelopment)
	r.Command, r.Workdir, r.User = []string{"/bin/sh", "-c", "true"}, "/", "1000:staff"
	r.Env = map[string]string{"LANG": "C"}
	p, err = Admit(r, pol(), imageFacts(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if p.Command[0] != "/bin/sh" || p.Workdir != "/" || p.Env["LANG"] != "C" || p.Env["PATH"] != "/usr/local/bin:/usr/bin" ||
		*p.User != (User{UID: 1000, GID: 50}) {
		t.Fatalf("overrides lost: command %q workdir %q env %v user %+v", p.Command, p.Workdir, p.Env, p.User)
	}
}

// A rootfs without a config gets the documented default PATH and runs as
// root; a numeric uid takes its primary gid from /etc/passwd.
func TestRootfsDefaults(t *testing.T) {
	r := req(request.TierDevelopment)
	p, err := Admit(r, pol(), imageFacts(ImageConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Env["PATH"] != request.DefaultPath || *p.User != (User{}) || p.Workdir != "/" {
		t.Fatalf("defaults: env %v user %+v workdir %q", p.Env, p.User, p.Workdir)
	}
	r.User = "1000"
	if p, err = Admit(r, pol(), imageFacts(ImageConfig{})); err != nil || *p.User != (User{UID: 1000, GID: 1001}) {
		t.Fatalf("user 1000: %+v, %v", p, err)
	}
	// A program or workdir in an input is read at launch, not here.
	r.Command, r.Workdir = []string{"/in/src/build.sh"}, "/in/src"
	r.Inputs = []request.Input{{Source: "/src", Target: "/in"}}
	// (The test policy has no input roots, so the input itself is refused.)
	_, err = Admit(r, pol(), imageFacts(ImageConfig{}))
	if c := codes(refusal(t, err)); strings.Contains(c, "command") || strings.Contains(c, "workdir") {
		t.Fatalf("a program and workdir in an input: %s", c)
	}
	r.Command, r.Workdir, r.Inputs = []string{"/bin/true"}, "", nil
	r.User = "4242"
	if p, err = Admit(r, pol(), imageFacts(ImageConfig{})); err != nil || *p.User != (User{UID: 4242}) {
		t.Fatalf("user 4242 (not in passwd): %+v, %v", p, err)
	}
}

// Each refusal names its requirement and a fix, before anything is spent;
// the legitimate neighbours are admitted above.
func TestImageConfigRefusals(t *testing.T) {
	forbid := pol()
	forbid.Users.ForbidRoot = true
	for _, tc := range []struct {
		name   string
		modify func(r *request.Phase)
		cfg    ImageConfig
		pol    *policy.Policy
		want   string
	}{
		{"missing workdir", func(r *request.Phase) { r.Workdir = "/nowhere" }, ImageConfig{}, nil, "workdir=workdir-missing"},
		{"workdir a file", func(r *request.Phase) { r.Workdir = "/etc/notes" }, ImageConfig{}, nil, "workdir=workdir-not-directory"},
		{"image workdir missing", func(r *request.Phase) {}, ImageConfig{WorkingDir: "/app"}, nil, "workdir=workdir-missing"},
		{"tiny cpu", func(r *request.Phase) { r.Resources.CPU = 0.005 }, ImageConfig{}, nil, "resources.cpu=cpu-below-minimum"},
		{"tmp over memory", func(r *request.Phase) {
			r.Resources.Memory = 16 << 20
			r.Tmp = &request.Tmp{MaxBytes: 32 << 20}
		}, ImageConfig{}, nil, "tmp.maxBytes=tmp-exceeds-memory"},
		{"unknown user", func(r *request.Phase) { r.User = "nobody" }, ImageConfig{}, nil, "user=user-unknown"},
		{"unknown group", func(r *request.Phase) { r.User = "1000:wheel" }, ImageConfig{}, nil, "user=group-unknown"},
		{"unmapped uid", func(r *request.Phase) { r.User = "70000" }, ImageConfig{}, nil, "user=user-unmapped"},
		{"root forbidden", func(r *request.Phase) {}, ImageConfig{}, forbid, "user=root-forbidden"},
		{"image root forbidden", func(r *request.Phase) {}, ImageConfig{User: "root"}, forbid, "user=root-forbidden"},
		{"no command", func(r *request.Phase) { r.Command = nil }, ImageConfig{}, nil, "command=command-missing"},
		{"command not in image", func(r *request.Phase) { r.Command = []string{"/bin/bash"} }, ImageConfig{}, nil, "command[0]=command-not-found"},
		{"image command not on PATH", func(r *request.Phase) { r.Command = nil }, ImageConfig{Cmd: []string{"pytest"}}, nil, "command[0]=command-not-found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req(request.TierDevelopment)
			r.Command = []string{"/bin/sh"}
			tc.modify(r)
			p := tc.pol
			if p == nil {
				p = pol()
			}
			_, err := Admit(r, p, imageFacts(tc.cfg))
			cs := refusal(t, err)
			if !strings.Contains(codes(cs), tc.want) {
				t.Fatalf("refusal %s, want %s", codes(cs), tc.want)
			}
			for _, c := range cs {
				if c.Fix == "" {
					t.Errorf("%s names no fix", c.Code)
				}
			}
		})
	}
	// Non-root passes a policy that forbids root; the policy's default
	// tmp is cut to a small memory budget rather than refused.
	r := req(request.TierDevelopment)
	r.User, r.Resources.Memory = "builder", 4<<20
	if p, err := Admit(r, forbid, imageFacts(ImageConfig{})); err != nil || p.TmpBytes != 4<<20 {
		t.Fatalf("builder under forbidRoot: %+v, %v", p, err)
	}
}

// The image's /etc/passwd and /etc/group and its config's User are
// untrusted: whatever they hold, admission neither panics nor resolves ids
// the sandbox does not map.
func FuzzImageUser(f *testing.F) {
	f.Add([]byte("root:x:0:0::/:/bin/sh\nb:x:1000:1000::/:/bin/sh\n"), []byte("staff:x:50:\n"), "b:staff")
	f.Add([]byte("a:x:99999999999:1\n::\n"), []byte(":::\n"), "a")
	f.Add([]byte(""), []byte(""), "0:0")
	f.Fuzz(func(t *testing.T, passwd, group []byte, user string) {
		tr := fstest.MapFS{"etc/passwd": {Data: passwd}, "etc/group": {Data: group}, "bin/sh": {Data: []byte("x"), Mode: 0o755}}
		r := req(request.TierDevelopment)
		r.Command = []string{"/bin/sh"}
		p, err := Admit(r, pol(), Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true,
			Image: &ImageFacts{Config: ImageConfig{User: user}, Tree: tr}})
		if err == nil && (p.User == nil || p.User.UID > MaxID || p.User.GID > MaxID) {
			t.Fatalf("user %q resolved to %+v", user, p.User)
		}
	})
}

// A policy that pins the image's run defaults refuses a phase that sets
// one, naming the field, and admits a phase that leaves it to the image.
// An image's StopSignal is resolved to its name; a bad one is refused.
func TestImageOverridesAndStopSignal(t *testing.T) {
	pinned := pol()
	pinned.ImageOverrides.Forbid = []string{"command", "user"}
	cfg := ImageConfig{Env: []string{"PATH=/usr/bin:/bin"}, Cmd: []string{"make"}, User: "builder", StopSignal: "TERM"}
	r := req(request.TierDevelopment)
	r.Command, r.User = []string{"/bin/sh"}, "root"
	cs := refusal(t, func() error { _, err := Admit(r, pinned, imageFacts(cfg)); return err }())
	if got := codes(cs); !strings.Contains(got, "command=image-override-forbidden") || !strings.Contains(got, "user=image-override-forbidden") {
		t.Fatalf("refusal %s", got)
	}
	r.Command, r.User = nil, ""
	p, err := Admit(r, pinned, imageFacts(cfg))
	if err != nil || p.Command[0] != "/usr/bin/make" || p.User.UID != 1000 || p.StopSignal != "SIGTERM" {
		t.Fatalf("a phase on the pinned defaults: %+v, %v", p, err)
	}
	cfg.StopSignal = "SIGNOPE"
	cs = refusal(t, func() error { _, err := Admit(r, pinned, imageFacts(cfg)); return err }())
	if !strings.Contains(codes(cs), "stopSignal=image-stop-signal-invalid") {
		t.Fatalf("refusal %s", codes(cs))
	}
	for in, want := range map[string]string{"SIGTERM": "SIGTERM", "term": "SIGTERM", "15": "SIGTERM", "0": "", "99": ""} {
		if got, _ := SignalName(in); got != want {
			t.Errorf("SignalName(%q) = %q, want %q", in, got, want)
		}
	}
}

// A plan whose memory-backed bounds exceed the memory budget says so.
func TestMemoryBackedBoundsTold(t *testing.T) {
	r := req(request.TierDevelopment)
	r.Resources.Memory, r.Tmp, r.Output.MaxBytes = 32<<20, &request.Tmp{MaxBytes: 16 << 20}, 32<<20
	p, err := Admit(r, pol(), imageFacts(ImageConfig{}))
	if err != nil || !strings.Contains(codes(p.Checks), "resources.memory=memory-backed-bounds") {
		t.Fatalf("plan %v, %v", p, err)
	}
	r.Output.MaxBytes = 8 << 20
	if p, err := Admit(r, pol(), imageFacts(ImageConfig{})); err != nil || strings.Contains(codes(p.Checks), "memory-backed-bounds") {
		t.Fatalf("bounds within memory: %v, %v", p, err)
	}
}

// An image's StopSignal is untrusted: whatever it says, SignalName neither
// panics nor names a signal the kernel does not have.
func FuzzSignalName(f *testing.F) {
	for _, s := range []string{"SIGTERM", "term", "15", "SIGRTMIN+3", "0", "-1", "SIG", "", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, ok := SignalName(s)
		if ok && (!strings.HasPrefix(name, "SIG") || unix.SignalNum(name) == 0) {
			t.Fatalf("SignalName(%q) = %q, not a signal", s, name)
		}
	})
}

// An image that gives entries to ids other than 0:0 is refused, naming
// the fix, on a backend that would show them as host ids (no user
// namespace); the same image is admitted where they are shifted, and an
// all-0:0 image is admitted on either.
func TestImageOwnersNeedShiftedIDs(t *testing.T) {
	for _, c := range []struct {
		name                      string
		owned, unshifted, refused bool
	}{
		{"owned-unshifted", true, true, true},
		{"owned-shifted", true, false, false},
		{"root-owned-unshifted", false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := imageFacts(ImageConfig{})
			f.Capabilities.HostImageOwners = c.unshifted
			f.Image.Owned = c.owned
			_, err := Admit(req(request.TierDevelopment), pol(), f)
			var re *RefusedError
			if !c.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.As(err, &re) {
				t.Fatalf("admitted, want refused: %v", err)
			}
			for _, ch := range re.Checks {
				if ch.Refused() && ch.Requirement == "image.owners" && ch.Code == "image-owners-unmapped" && strings.Contains(ch.Fix, "userNamespace") {
					return
				}
			}
			t.Fatalf("no image.owners refusal naming the fix: %+v", re.Checks)
		})
	}
}
