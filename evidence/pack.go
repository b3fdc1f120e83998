package evidence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/grant"
	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// Operations a pack receipt records.
const (
	// PackUp: the pack was realized; the receipt lists what by native ID.
	PackUp = "up"
	// PackDown: the workspace was torn down; the receipt lists each
	// resource's cleanup result.
	PackDown = "down"
	// PackUpFailed: an up failed and its attempt was torn down; the
	// receipt (predicate.PackReceiptV2) says why (Failure) and lists each
	// resource's cleanup result, as a down receipt does.
	PackUpFailed = "up-failed"
)

// Cleanup results of one pack resource.
const (
	// CleanupGone: the native ID was confirmed gone from the engine.
	CleanupGone = "gone"
	// CleanupKept: left in place on purpose (a volume without down
	// --volumes); the reason says why.
	CleanupKept = "kept"
	// CleanupResidual: still there, or not confirmed gone; the reason
	// says why.
	CleanupResidual = "residual"
)

// Kinds of pack resources.
const (
	KindContainer = "container"
	KindNetwork   = "network"
	KindVolume    = "volume"
	// KindChildContainer is a container custody did not create that a
	// daemon-socket holder of the workspace is taken to have made (P3).
	KindChildContainer = "child-container"
	// KindChildNetwork and KindChildVolume are a network and a volume such
	// a socket holder is taken to have made. Only a pack-receipt/v3
	// receipt lists them; a child volume's id is its name.
	KindChildNetwork = "child-network"
	KindChildVolume  = "child-volume"
)

// Subject name prefixes of a pack receipt's statement.
const (
	// ComposeSubjectPrefix starts the subject of the compose file:
	// "compose/<project>", the SHA-256 of the file's exact bytes.
	ComposeSubjectPrefix = "compose/"
	// PlanSubjectPrefix starts the subject of the admitted plan:
	// "plan/<project>", the SHA-256 of the plan's canonical JSON (the
	// pack grant's subject digest).
	PlanSubjectPrefix = "plan/"
)

var (
	packOperations   = []string{PackUp, PackDown, PackUpFailed}
	cleanupResults   = []string{CleanupGone, CleanupKept, CleanupResidual}
	packKinds        = []string{KindContainer, KindNetwork, KindVolume, KindChildContainer, KindChildNetwork, KindChildVolume}
	mountTypes       = []string{"bind", "volume", "tmpfs"}
	choiceKind       = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	containerPort    = regexp.MustCompile(`^[0-9]{1,5}/(tcp|udp|sctp)$`)
	maxPackResources = 4096
)

// PackReceipt is the predicate of a pack receipt: the runner's account of
// one pack operation on the engine, read back from the engine by native ID
// after the fact, never copied from what custody asked for.
type PackReceipt struct {
	// Operation is PackUp, PackDown or (v2 and v3 only) PackUpFailed.
	Operation string `json:"operation"`
	// Failure says why the up of an up-failed receipt failed; required
	// there, absent from every other receipt.
	Failure string `json:"failure,omitempty"`
	// Runner is the runner identity key that signs the receipt.
	Runner Identity `json:"runner"`
	// Grant is the pack grant the workspace was brought up under, embedded
	// whole (a down receipt names the grant of the workspace it tore down).
	Grant GrantRef `json:"grant"`
	// Workspace is the workspace's unguessable id (the dev.custody label).
	Workspace string `json:"workspace"`
	// Attempt is the id of this attempt at the operation.
	Attempt string `json:"attempt"`
	// Pack is the compose project and file the plan was admitted from.
	Pack PackRef `json:"pack"`
	// PlanDigest is "sha256:<hex>" of the admitted plan's canonical JSON:
	// the pack grant's subject digest.
	PlanDigest string `json:"planDigest"`
	// Engine is the engine the operation ran against, as it reported
	// itself.
	Engine Engine `json:"engine"`
	// Containers, Networks and Volumes are what up realized, by native ID,
	// sorted by ID (volumes by name). A down receipt has none: it records
	// Cleanup instead.
	Containers []PackContainer `json:"containers"`
	Networks   []PackNetwork   `json:"networks"`
	Volumes    []PackVolume    `json:"volumes"`
	// Choices are the open choices the backend made up front (host ports,
	// names, subnets). A down receipt has none.
	Choices []PackChoice `json:"choices"`
	// Cleanup is what down did to each resource. Required of a down
	// receipt, absent from an up receipt.
	Cleanup *PackCleanup `json:"cleanup,omitempty"`
	// Started and Finished bound the operation. Finished is when the
	// receipt is taken to be signed.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// PackRef is a compose project and its file.
type PackRef struct {
	// Project is the compose project name (grant.IsProjectName).
	Project string `json:"project"`
	// Digest is "sha256:<hex>" of the exact compose file bytes.
	Digest string `json:"digest"`
}

// Engine is a container engine's identity as it reports it.
type Engine struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	APIVersion string `json:"apiVersion"`
}

// PackContainer is one container up realized.
type PackContainer struct {
	// Service is the compose service it realizes.
	Service string `json:"service"`
	// ID is the engine's container ID: 64 lowercase hex digits.
	ID string `json:"id"`
	// Name is the container's name as the engine reports it.
	Name string `json:"name"`
	// ImageID is the content ID of the image it runs, "sha256:<hex>".
	ImageID string `json:"imageId"`
	// HostConfigSHA256 is the lowercase hex SHA-256 of the HostConfig
	// member of the engine's inspect response, compacted (encoding/json
	// Compact of the bytes the engine sent).
	HostConfigSHA256 string `json:"hostConfigSha256"`
	// HostConfig is the security-relevant part of that same HostConfig.
	HostConfig PackHostConfig `json:"hostConfig"`
}

// PackHostConfig is the security-relevant part of a container's effective
// HostConfig as the engine reported it. Lists keep the engine's order; an
// empty mode is the engine's default.
type PackHostConfig struct {
	Privileged     bool        `json:"privileged"`
	CapAdd         []string    `json:"capAdd"`
	CapDrop        []string    `json:"capDrop"`
	NetworkMode    string      `json:"networkMode"`
	PidMode        string      `json:"pidMode"`
	IpcMode        string      `json:"ipcMode"`
	UTSMode        string      `json:"utsMode"`
	UsernsMode     string      `json:"usernsMode"`
	CgroupnsMode   string      `json:"cgroupnsMode"`
	Mounts         []PackMount `json:"mounts"`
	Devices        []string    `json:"devices"`
	PortBindings   []PackPort  `json:"portBindings"`
	ReadonlyRootfs bool        `json:"readonlyRootfs"`
	SecurityOpt    []string    `json:"securityOpt"`
	// MemoryBytes, NanoCPUs and PidsLimit are the limits; 0 is none.
	MemoryBytes int64 `json:"memoryBytes"`
	NanoCPUs    int64 `json:"nanoCpus"`
	PidsLimit   int64 `json:"pidsLimit"`
}

// PackMount is one bind, volume or tmpfs mount of a container.
type PackMount struct {
	// Type is "bind", "volume" or "tmpfs".
	Type string `json:"type"`
	// Source is the host path of a bind or the name of a volume; empty
	// for tmpfs.
	Source string `json:"source"`
	// Target is the absolute path inside the container.
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
}

// PackPort is one published port.
type PackPort struct {
	// ContainerPort is "<port>/<tcp|udp|sctp>".
	ContainerPort string `json:"containerPort"`
	// HostIP is the address the host side binds; "" is the engine's
	// default (every address).
	HostIP string `json:"hostIp"`
	// HostPort is the host port, 1 to 65535.
	HostPort int `json:"hostPort"`
}

// PackNetwork is one network up realized.
type PackNetwork struct {
	Name string `json:"name"`
	// ID is the engine's network ID: 64 lowercase hex digits.
	ID       string `json:"id"`
	Internal bool   `json:"internal"`
}

// PackVolume is one volume up realized; a volume's name is its native ID.
type PackVolume struct {
	Name string `json:"name"`
}

// PackChoice is one open choice the backend made and recorded, e.g.
// {"kind":"host-port","subject":"web 80/tcp","value":"127.0.0.1:49153"}.
type PackChoice struct {
	// Kind is lowercase letters, digits and "-", e.g. "host-port",
	// "container-name", "subnet".
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Value   string `json:"value"`
}

// PackCleanup is what a down did to each resource it covers.
type PackCleanup struct {
	// Verified is true exactly when no resource is residual.
	Verified  bool                  `json:"verified"`
	Resources []PackCleanupResource `json:"resources"`
}

// PackCleanupResource is one resource's cleanup result.
type PackCleanupResource struct {
	// Kind is "container", "network" or "volume", or the kind of an
	// engine-socket holder's child: KindChildContainer, or (v3 only)
	// KindChildNetwork or KindChildVolume.
	Kind string `json:"kind"`
	// ID is the native ID: 64 lowercase hex digits for a container or
	// network, the name for a volume (a child volume too).
	ID   string `json:"id"`
	Name string `json:"name"`
	// Result is CleanupGone, CleanupKept or CleanupResidual.
	Result string `json:"result"`
	// Reason says why a resource was kept or is residual; required then.
	Reason string `json:"reason,omitempty"`
}

// Subjects returns the in-toto subjects of r's statement:
// "compose/<project>" with the compose file's sha256, then
// "plan/<project>" with the plan's. It fails if those fields are not well
// formed.
func (r *PackReceipt) Subjects() ([]Subject, error) {
	var ps problems
	checkPackRef(&ps, r)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return packSubjectsOf(r), nil
}

func packSubjectsOf(r *PackReceipt) []Subject {
	return []Subject{
		{Name: ComposeSubjectPrefix + r.Pack.Project, Digest: map[string]string{"sha256": strings.TrimPrefix(r.Pack.Digest, "sha256:")}},
		{Name: PlanSubjectPrefix + r.Pack.Project, Digest: map[string]string{"sha256": strings.TrimPrefix(r.PlanDigest, "sha256:")}},
	}
}

// SignPackReceipt validates r, builds its statement (subjects: the compose
// file and the plan) and DSSE-signs it with the runner key, returning the
// envelope JSON. As [SignReceipt], it converts times to UTC and nil lists
// to empty ones and fills nothing else in; r.Runner.ID must be the runner
// key's keys.KeyID. [Bundle] re-wraps the envelope for Sigstore tooling.
func SignPackReceipt(ctx context.Context, runner *keys.Signer, r PackReceipt) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: sign pack receipt: %w", err)
	}
	if runner == nil {
		return nil, errors.New("evidence: sign pack receipt: nil runner key")
	}
	normalizePack(&r)
	if err := validatePackReceipt(&r); err != nil {
		return nil, fmt.Errorf("evidence: sign pack receipt: invalid receipt: %w", err)
	}
	if r.Runner.ID != runner.ID() {
		return nil, fmt.Errorf("evidence: sign pack receipt: runner.id %s is not the signing key %s", r.Runner.ID, runner.ID())
	}
	subjects := packSubjectsOf(&r)
	payload, err := encodeStatement(packPredicateType(&r), subjects, &r)
	if err != nil {
		return nil, fmt.Errorf("evidence: sign pack receipt: %w", err)
	}
	// What is signed must be what the verifier accepts, and an in-toto
	// statement by in-toto's own parser.
	if _, _, err := decodePackStatement(payload); err != nil {
		return nil, fmt.Errorf("evidence: sign pack receipt: the statement does not decode: %w", err)
	}
	if err := checkInToto(payload); err != nil {
		return nil, fmt.Errorf("evidence: sign pack receipt: %w", err)
	}
	out, err := signStatement(ctx, runner, payload)
	if err != nil {
		return nil, fmt.Errorf("evidence: sign pack receipt: %w", err)
	}
	return out, nil
}

// normalizePack converts times to UTC and nil lists to empty ones, so that
// the signed JSON has one shape whatever the caller passed.
func normalizePack(r *PackReceipt) {
	r.Started, r.Finished = r.Started.UTC(), r.Finished.UTC()
	r.Containers = emptyIfNil(r.Containers)
	r.Networks = emptyIfNil(r.Networks)
	r.Volumes = emptyIfNil(r.Volumes)
	r.Choices = emptyIfNil(r.Choices)
	for i := range r.Containers {
		h := &r.Containers[i].HostConfig
		h.CapAdd, h.CapDrop = emptyIfNil(h.CapAdd), emptyIfNil(h.CapDrop)
		h.Mounts, h.Devices = emptyIfNil(h.Mounts), emptyIfNil(h.Devices)
		h.PortBindings, h.SecurityOpt = emptyIfNil(h.PortBindings), emptyIfNil(h.SecurityOpt)
	}
	if r.Cleanup != nil {
		c := *r.Cleanup
		c.Resources = emptyIfNil(c.Resources)
		r.Cleanup = &c
	}
}

func emptyIfNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// packPredicateType is the one predicate type r is signed under: v3 for
// a receipt whose cleanup lists a child network or volume, v2 for any
// other up-failed receipt, v1 for the rest, so each version keeps its
// meaning and an older verifier never meets a kind it does not know.
func packPredicateType(r *PackReceipt) string {
	if r.Cleanup != nil && slices.ContainsFunc(r.Cleanup.Resources, func(res PackCleanupResource) bool {
		return res.Kind == KindChildNetwork || res.Kind == KindChildVolume
	}) {
		return predicate.PackReceiptV3
	}
	if r.Operation == PackUpFailed {
		return predicate.PackReceiptV2
	}
	return predicate.PackReceipt
}

// packPredicateTypes are the pack receipt versions custody verifies.
var packPredicateTypes = []string{predicate.PackReceipt, predicate.PackReceiptV2, predicate.PackReceiptV3}

// decodePackStatement decodes a pack receipt statement strictly, requires
// the canonical form SignPackReceipt produces byte for byte, validates the
// predicate and checks that the subjects are exactly those derived from it.
func decodePackStatement(payload []byte) (*PackReceipt, []Subject, error) {
	// Fast path: one typed decode and one canonical encode; the explained
	// path accepts exactly the same payloads and says what is wrong.
	var typed cdsse.Statement[PackReceipt]
	if cdsse.DecodeCanonical(payload, &typed) && typed.Type == cdsse.StatementType && typed.PredicateType == packPredicateType(&typed.Predicate) {
		return checkPackStatement(&typed.Predicate, typed.Subject)
	}
	return decodePackStatementExplained(payload)
}

func decodePackStatementExplained(payload []byte) (*PackReceipt, []Subject, error) {
	var st statement
	if err := cdsse.StrictUnmarshal(payload, &st); err != nil {
		return nil, nil, fmt.Errorf("statement: %v", err)
	}
	if st.Type != cdsse.StatementType {
		return nil, nil, fmt.Errorf("_type %q is not %q", cdsse.Clip(st.Type), cdsse.StatementType)
	}
	if !slices.Contains(packPredicateTypes, st.PredicateType) {
		return nil, nil, fmt.Errorf("predicateType %q is none of %s", cdsse.Clip(st.PredicateType), strings.Join(packPredicateTypes, ", "))
	}
	var r PackReceipt
	if err := cdsse.StrictUnmarshal(st.Predicate, &r); err != nil {
		return nil, nil, fmt.Errorf("predicate: %v", err)
	}
	if want := packPredicateType(&r); st.PredicateType != want {
		return nil, nil, fmt.Errorf("predicateType %q does not carry operation %q with cleanup kinds %s: that is %q",
			cdsse.Clip(st.PredicateType), cdsse.Clip(r.Operation), cleanupKinds(&r), want)
	}
	// Byte-for-byte canonical form: this refuses duplicate or differently
	// cased members, nulls, escapes and number or time spellings that
	// decode to the same value, and trailing data.
	pred, err := cdsse.CanonicalJSON(&r)
	if err != nil {
		return nil, nil, fmt.Errorf("predicate: %v", err)
	}
	canon := st
	canon.Predicate = pred
	again, err := cdsse.CanonicalJSON(&canon)
	if err != nil || !bytes.Equal(again, payload) {
		return nil, nil, errors.New("statement is not in canonical form")
	}
	return checkPackStatement(&r, st.Subject)
}

// cleanupKinds lists the distinct cleanup kinds of r, for a diagnostic.
func cleanupKinds(r *PackReceipt) string {
	if r.Cleanup == nil {
		return "none"
	}
	var ks []string
	for _, res := range r.Cleanup.Resources {
		if k := cdsse.Clip(res.Kind); !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return "none"
	}
	return strings.Join(ks, ", ")
}

// checkPackStatement validates a canonical pack receipt and its subjects.
func checkPackStatement(r *PackReceipt, subjects []cdsse.Subject) (*PackReceipt, []Subject, error) {
	if err := validatePackReceipt(r); err != nil {
		return nil, nil, fmt.Errorf("predicate: %v", err)
	}
	want := packSubjectsOf(r)
	if err := subjectsMatch(subjects, want, "predicate.pack and predicate.planDigest"); err != nil {
		return nil, nil, err
	}
	return r, want, nil
}

// validatePackReceipt checks every field of r. It fills nothing in.
func validatePackReceipt(r *PackReceipt) error {
	var ps problems
	ps.oneOf("operation", r.Operation, packOperations)
	ps.keyID("runner.id", r.Runner.ID)
	checkGrantRef(&ps, &r.Grant)
	ps.text("workspace", r.Workspace)
	ps.text("attempt", r.Attempt)
	checkPackRef(&ps, r)
	ps.text("engine.name", r.Engine.Name)
	ps.text("engine.version", r.Engine.Version)
	ps.text("engine.apiVersion", r.Engine.APIVersion)

	if n := len(r.Containers) + len(r.Networks) + len(r.Volumes) + len(r.Choices); n > maxPackResources {
		ps.add("containers", "%d containers, networks, volumes and choices, more than %d", n, maxPackResources)
		return ps.err()
	}
	for i := range r.Containers {
		checkPackContainer(&ps, fmt.Sprintf("containers[%d]", i), &r.Containers[i])
		if i > 0 && r.Containers[i-1].ID >= r.Containers[i].ID {
			ps.add(fmt.Sprintf("containers[%d].id", i), "not after the one before: containers must be sorted by id, each once")
		}
	}
	for i, n := range r.Networks {
		field := fmt.Sprintf("networks[%d]", i)
		ps.text(field+".name", n.Name)
		ps.hex64(field+".id", n.ID)
		if i > 0 && r.Networks[i-1].ID >= n.ID {
			ps.add(field+".id", "not after the one before: networks must be sorted by id, each once")
		}
	}
	for i, v := range r.Volumes {
		field := fmt.Sprintf("volumes[%d].name", i)
		ps.text(field, v.Name)
		if i > 0 && r.Volumes[i-1].Name >= v.Name {
			ps.add(field, "not after the one before: volumes must be sorted by name, each once")
		}
	}
	for i, c := range r.Choices {
		field := fmt.Sprintf("choices[%d]", i)
		if !choiceKind.MatchString(c.Kind) {
			ps.add(field+".kind", "%q is not a choice kind (^[a-z][a-z0-9-]{0,31}$)", cdsse.Clip(c.Kind))
		}
		ps.text(field+".subject", c.Subject)
		ps.text(field+".value", c.Value)
	}

	switch r.Operation {
	case PackUp:
		if r.Cleanup != nil {
			ps.add("cleanup", "an up receipt records no cleanup")
		}
	case PackDown, PackUpFailed:
		if len(r.Containers)+len(r.Networks)+len(r.Volumes)+len(r.Choices) != 0 {
			ps.add("containers", "a down receipt records cleanup results, not realized containers, networks, volumes or choices")
		}
		if r.Cleanup == nil {
			ps.add("cleanup", "missing: a down receipt records each resource's cleanup result")
		} else {
			checkPackCleanup(&ps, r.Cleanup)
		}
	}

	if r.Operation == PackUpFailed {
		ps.text("failure", r.Failure)
	} else if r.Failure != "" {
		ps.add("failure", "only an up-failed receipt says why an up failed")
	}
	ps.time("started", r.Started)
	ps.time("finished", r.Finished)
	if !r.Started.IsZero() && !r.Finished.IsZero() && r.Finished.Before(r.Started) {
		ps.add("finished", "%s is before started %s", r.Finished.Format(time.RFC3339Nano), r.Started.Format(time.RFC3339Nano))
	}
	return ps.err()
}

func checkPackRef(ps *problems, r *PackReceipt) {
	if !grant.IsProjectName(r.Pack.Project) {
		ps.add("pack.project", "%q is not a compose project name", cdsse.Clip(r.Pack.Project))
	}
	ps.digest("pack.digest", r.Pack.Digest)
	ps.digest("planDigest", r.PlanDigest)
}

func checkPackContainer(ps *problems, field string, c *PackContainer) {
	ps.text(field+".service", c.Service)
	ps.hex64(field+".id", c.ID)
	ps.text(field+".name", c.Name)
	ps.digest(field+".imageId", c.ImageID)
	ps.hex64(field+".hostConfigSha256", c.HostConfigSHA256)
	h := &c.HostConfig
	field += ".hostConfig"
	if n := len(h.CapAdd) + len(h.CapDrop) + len(h.Mounts) + len(h.Devices) + len(h.PortBindings) + len(h.SecurityOpt); n > maxListElements {
		ps.add(field, "%d list entries, more than %d", n, maxListElements)
		return
	}
	for _, l := range []struct {
		name string
		list []string
	}{{"capAdd", h.CapAdd}, {"capDrop", h.CapDrop}, {"devices", h.Devices}, {"securityOpt", h.SecurityOpt}} {
		for i, s := range l.list {
			ps.text(fmt.Sprintf("%s.%s[%d]", field, l.name, i), s)
		}
	}
	for _, m := range []struct{ name, v string }{
		{"networkMode", h.NetworkMode}, {"pidMode", h.PidMode}, {"ipcMode", h.IpcMode},
		{"utsMode", h.UTSMode}, {"usernsMode", h.UsernsMode}, {"cgroupnsMode", h.CgroupnsMode},
	} {
		ps.optText(field+"."+m.name, m.v)
	}
	for i, m := range h.Mounts {
		mf := fmt.Sprintf("%s.mounts[%d]", field, i)
		ps.oneOf(mf+".type", m.Type, mountTypes)
		if m.Type == "tmpfs" {
			if m.Source != "" {
				ps.add(mf+".source", "a tmpfs mount has no source")
			}
		} else {
			ps.text(mf+".source", m.Source)
		}
		ps.absPath(mf+".target", m.Target)
	}
	for i, p := range h.PortBindings {
		pf := fmt.Sprintf("%s.portBindings[%d]", field, i)
		if !containerPort.MatchString(p.ContainerPort) {
			ps.add(pf+".containerPort", "%q is not <port>/<tcp|udp|sctp>", cdsse.Clip(p.ContainerPort))
		}
		if p.HostIP != "" {
			if a, err := netip.ParseAddr(p.HostIP); err != nil || a.String() != p.HostIP {
				ps.add(pf+".hostIp", "%q is not an IP address in its canonical form", cdsse.Clip(p.HostIP))
			}
		}
		if p.HostPort < 1 || p.HostPort > 65535 {
			ps.add(pf+".hostPort", "%d is not a port (1 to 65535)", p.HostPort)
		}
	}
	ps.nonNegative(field+".memoryBytes", h.MemoryBytes)
	ps.nonNegative(field+".nanoCpus", h.NanoCPUs)
	ps.nonNegative(field+".pidsLimit", h.PidsLimit)
}

func checkPackCleanup(ps *problems, c *PackCleanup) {
	if len(c.Resources) > maxPackResources {
		ps.add("cleanup.resources", "%d entries, more than %d", len(c.Resources), maxPackResources)
		return
	}
	residual := false
	seen := make(map[string]bool, len(c.Resources))
	for i, res := range c.Resources {
		field := fmt.Sprintf("cleanup.resources[%d]", i)
		ps.oneOf(field+".kind", res.Kind, packKinds)
		ps.text(field+".name", res.Name)
		if res.Kind == KindVolume || res.Kind == KindChildVolume {
			if res.ID != res.Name {
				ps.add(field+".id", "a volume's id is its name (%q), not %q", cdsse.Clip(res.Name), cdsse.Clip(res.ID))
			}
		} else {
			ps.hex64(field+".id", res.ID)
		}
		if key := res.Kind + "/" + res.ID; seen[key] {
			ps.add(field+".id", "%s %q appears twice", res.Kind, cdsse.Clip(res.ID))
		} else {
			seen[key] = true
		}
		ps.oneOf(field+".result", res.Result, cleanupResults)
		switch res.Result {
		case CleanupGone:
			if res.Reason != "" {
				ps.add(field+".reason", "a resource that is gone has no reason")
			}
		case CleanupKept, CleanupResidual:
			ps.text(field+".reason", res.Reason)
		}
		residual = residual || res.Result == CleanupResidual
	}
	switch {
	case c.Verified && residual:
		ps.add("cleanup.verified", "true, but a resource is residual")
	case !c.Verified && !residual:
		ps.add("cleanup.verified", "false, but no resource is residual")
	}
}
