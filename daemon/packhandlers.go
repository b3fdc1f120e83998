package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/pack"
)

// Pack endpoints. Like phases, admission (a dry run that grants nothing)
// answers on both sockets and minting a grant only on control. Up, status
// and down answer on submit for the workspace's owner (the uid whose up
// created it) and on control for operators, for every workspace; recovery
// is control only. A client asking about another uid's workspace is told
// it does not exist, as with runs.

// packAPI serves the pack endpoints over the pack lifecycle.
type packAPI struct {
	// docker is custodyd's docker: section; nil, packs are disabled.
	docker *config.DockerConfig
	// packs is the pack lifecycle (nil without a docker: section, or when
	// it could not be set up: err says why).
	packs packs
	err   error
	// locks serialize operations on one workspace name.
	locks wsLocks
	log   *slog.Logger
	// dryRun takes one of uid's dry runs on the submit socket, or answers
	// the refusal (the server's per-uid limits).
	dryRun func(w http.ResponseWriter, uid uint32) (release func(), ok bool)
}

// packRoutes registers the pack endpoints a socket serves.
func (s *packAPI) packRoutes(mux router, operator bool) {
	mux.HandleFunc("POST /v1/packs/admit", s.handlePackAdmit(operator))
	mux.HandleFunc("POST /v1/packs/up", s.handlePackUp)
	mux.HandleFunc("GET /v1/workspaces", s.handlePackList(operator))
	mux.HandleFunc("GET /v1/workspaces/{name}", s.handlePackStatus(operator))
	mux.HandleFunc("POST /v1/workspaces/{name}/down", s.handlePackDown(operator))
	if operator {
		mux.HandleFunc("POST /v1/packs/grants", s.handlePackIssue)
		mux.HandleFunc("POST /v1/packs/recover", s.handlePackRecover)
	}
}

// packControlOnly are the pack operations refused by name on submit.
func packControlOnly() []string { return []string{"/v1/packs/grants", "/v1/packs/recover"} }

// packService returns the pack lifecycle, or the refusal that stands in
// for it, naming the fix.
func (s *packAPI) packService() (packs, error) {
	switch {
	case s.docker == nil:
		return nil, &api.Error{Code: api.CodePacksDisabled, Message: "this runner takes no packs: custodyd's configuration has no docker: section; " +
			"fix: add `docker: {host: unix:///path/to/engine.sock}` (the engine custody may drive) to custodyd.yaml and restart custodyd"}
	case s.packs == nil:
		return nil, &api.Error{Code: api.CodePacksUnavailable, Message: fmt.Sprintf(
			"this runner takes no packs: the docker: section is configured but the pack service did not start: %v; fix: correct it (custodyd's log has the details) and restart custodyd", s.err)}
	}
	return s.packs, nil
}

// packRequest decodes a pack request into in and returns the pack
// lifecycle; for a request that carries a pack (pack not nil) it first
// refuses one whose directory could mean anything.
func (s *packAPI) packRequest(r *http.Request, in any, pack func() api.PackSource) (packs, error) {
	if err := decode(r, in); err != nil {
		return nil, err
	}
	p, err := s.packService()
	if err != nil {
		return nil, err
	}
	if pack == nil {
		return p, nil
	}
	if dir := pack().Dir; !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return nil, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(
			"pack dir %q: want the compose file's absolute, clean directory (bind sources are resolved against it)", dir)}
	}
	return p, nil
}

// handlePackAdmit is the dry run. On the control socket it is the grant
// issue's decision, bind sources inspected; on the submit socket it is
// bounded per uid, answers only a submitter of the pack actor, and judges
// bind sources by their path alone (workspace.Manager.AdmitFor).
func (s *packAPI) handlePackAdmit(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pr := peerOf(r)
		if !operator {
			release, ok := s.dryRun(w, pr.UID)
			if !ok {
				return
			}
			defer release()
		}
		var in api.PackAdmitRequest
		p, err := s.packRequest(r, &in, func() api.PackSource { return in.Pack })
		if err != nil {
			writeError(w, err)
			return
		}
		var plan *admission.PackPlan
		if operator {
			plan, err = p.Admit(r.Context(), in.Pack.Compose, in.Pack.Dir, in.Actor, loadOptions(in.Pack))
		} else {
			plan, err = p.AdmitFor(r.Context(), in.Pack.Compose, in.Pack.Dir, in.Actor, packPeer{UID: pr.UID, GID: pr.GID, PID: pr.PID, Known: pr.ok}, loadOptions(in.Pack))
		}
		var re *admission.RefusedError
		if errors.As(err, &re) {
			writeJSON(w, api.PackAdmitResponse{Admitted: false, Checks: wireChecks(re.Checks)})
			return
		} else if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, wirePackAdmit(plan))
	}
}

// loadOptions are the operator's load options a pack request carries.
func loadOptions(src api.PackSource) pack.Options {
	return pack.Options{Profiles: src.Profiles, ProjectName: src.ProjectName}
}

func wirePackAdmit(plan *admission.PackPlan) api.PackAdmitResponse {
	raw, _ := json.Marshal(plan)
	return api.PackAdmitResponse{Admitted: true, HostRootEquivalent: plan.HostRootEquivalent,
		HostRootReasons: plan.HostRootReasons, Plan: raw, Checks: wireChecks(plan.Checks)}
}

func (s *packAPI) handlePackIssue(w http.ResponseWriter, r *http.Request) {
	var in api.PackIssueRequest
	p, err := s.packRequest(r, &in, func() api.PackSource { return in.Pack })
	if err != nil {
		writeError(w, err)
		return
	}
	ttl, err := time.ParseDuration(in.TTL)
	if err != nil || ttl <= 0 {
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("ttl %q: want a positive duration such as 1h", in.TTL)})
		return
	}
	env, err := p.Issue(r.Context(), in.Pack.Compose, in.Pack.Dir, in.Actor, ttl, loadOptions(in.Pack))
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("pack grant issued", "actor", in.Actor, "uid", peerOf(r).UID)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(env)
}

// handlePackUp realizes a granted pack. The pack lifecycle checks the
// submitting peer against the grant's actor; the peer's uid becomes the
// workspace's owner.
func (s *packAPI) handlePackUp(w http.ResponseWriter, r *http.Request) {
	var in api.PackUpRequest
	p, err := s.packRequest(r, &in, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	pr := peerOf(r)
	unlock := s.locks.lock(in.Workspace)
	rep, err := p.Up(r.Context(), in.Grant, in.Workspace, packPeer{UID: pr.UID, GID: pr.GID, PID: pr.PID, Known: pr.ok})
	unlock()
	s.writeReport(w, "up", in.Workspace, pr.UID, rep, err)
}

// writeReport answers an up or down: the report, with the error inside it
// when the operation changed something and then failed; the error alone
// when it changed nothing.
func (s *packAPI) writeReport(w http.ResponseWriter, op, workspace string, uid uint32, rep *packReport, err error) {
	if err != nil && rep == nil {
		s.log.Warn("pack "+op+" refused", "workspace", workspace, "uid", uid, "err", err)
		writeError(w, err)
		return
	}
	out := wirePackReport(rep)
	if err != nil {
		s.log.Error("pack "+op+" failed", "workspace", workspace, "uid", uid, "state", rep.State, "err", err)
		out.Error = toAPIError(err)
	} else {
		s.log.Info("pack "+op, "workspace", workspace, "uid", uid, "state", rep.State, "id", rep.ID)
	}
	writeJSON(w, out)
}

// visible says whether the caller may see a workspace: operators every
// one, clients their own.
func visible(operator bool, uid uint32, rep *packReport) bool {
	return operator || (rep.OwnerKnown && rep.Owner == uid)
}

func notYours(name string) error {
	return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("workspace %q not found", name)}
}

func (s *packAPI) handlePackStatus(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.packService()
		if err != nil {
			writeError(w, err)
			return
		}
		name := r.PathValue("name")
		rep, err := p.Status(r.Context(), name)
		if err == nil && !visible(operator, peerOf(r).UID, rep) {
			err = notYours(name)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, wirePackReport(rep))
	}
}

func (s *packAPI) handlePackList(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.packService()
		if err != nil {
			writeError(w, err)
			return
		}
		reps, err := p.List(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		out := api.PackList{Workspaces: []api.PackReport{}}
		for i := range reps {
			if visible(operator, peerOf(r).UID, &reps[i]) {
				out.Workspaces = append(out.Workspaces, wirePackReport(&reps[i]))
			}
		}
		writeJSON(w, out)
	}
}

// handlePackDown tears a workspace down. A client's down first checks,
// under the workspace's lock, that the workspace is the client's own. The
// removal of socket holders' children is an operator's decision (P4: no
// proof custody owns them), so a client asking for it is refused before
// anything is touched.
func (s *packAPI) handlePackDown(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in api.PackDownRequest
		p, err := s.packRequest(r, &in, nil)
		if err != nil {
			writeError(w, err)
			return
		}
		name, uid := r.PathValue("name"), peerOf(r).UID
		if in.Children && !operator {
			writeError(w, &api.Error{Code: api.CodeForbidden, Message: "P4: removing an engine-socket holder's children is refused on the submit socket: " +
				"custody cannot prove it owns them (no journal record, none of its labels), so only an operator may decide; " +
				"fix: an operator runs custody pack down --workspace " + name + " --children --operator"})
			return
		}
		unlock := s.locks.lock(name)
		defer unlock()
		if !operator {
			rep, err := p.Status(r.Context(), name)
			if err == nil && !visible(false, uid, rep) {
				err = notYours(name)
			}
			if err != nil {
				writeError(w, err)
				return
			}
		}
		rep, err := p.Down(r.Context(), name, in.Volumes, in.Children)
		s.writeReport(w, "down", name, uid, rep, err)
	}
}

func (s *packAPI) handlePackRecover(w http.ResponseWriter, r *http.Request) {
	p, err := s.packService()
	if err != nil {
		writeError(w, err)
		return
	}
	reps, err := p.Recover(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.PackRecovery{Workspaces: make([]api.PackReport, 0, len(reps))}
	for i := range reps {
		out.Workspaces = append(out.Workspaces, wirePackReport(&reps[i]))
	}
	s.log.Info("pack recovery", "uid", peerOf(r).UID, "workspaces", len(reps))
	writeJSON(w, out)
}

// wirePackReport is a workspace report as it crosses the wire; lists are
// never null.
func wirePackReport(r *packReport) api.PackReport {
	out := api.PackReport{Workspace: r.Workspace, ID: r.ID, Project: r.Project, State: r.State,
		Resources: wirePackResources(r.Resources), Covered: append([]string{}, r.Covered...),
		Foreign: wirePackResources(r.Foreign), Children: wirePackResources(r.Children), Detail: r.Detail, Retry: r.Retry}
	if r.OwnerKnown {
		owner := r.Owner
		out.Owner = &owner
	}
	if r.Plan != nil {
		out.Plan, _ = json.Marshal(r.Plan)
	}
	if len(r.Receipt) > 0 {
		out.Receipt = json.RawMessage(r.Receipt)
	}
	if len(r.Bundle) > 0 {
		out.Bundle = json.RawMessage(r.Bundle)
	}
	return out
}

func wirePackResources(rs []packResource) []api.PackResource {
	out := make([]api.PackResource, 0, len(rs))
	for _, r := range rs {
		out = append(out, api.PackResource(r))
	}
	return out
}
