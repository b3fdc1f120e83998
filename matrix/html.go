package matrix

import (
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/backend"
)

// HTMLOptions configure WriteHTML.
type HTMLOptions struct {
	Title    string
	Now      time.Time
	MaxAge   time.Duration
	Disabled *Disabled
}

// The page is read at a glance: one line per row (platform, backend, tier,
// state, then one cell per control family), and everything else (each
// check, its detail, the row's signer, runtime digest and host facts) behind
// <details>, so no JavaScript is needed and the table fits a laptop screen.
type htmlRow struct {
	File, State, StateClass, Auth               string
	OSArch, Kernel, Distro, Cgroup, Facts       string
	Backend, Runtime, RuntimeSHA, Tier, Custody string
	Suite, Qualified, Result, PlatformDigest    string
	Missing                                     string
	// Short forms for the one-line row; the details carry the long ones.
	StateWhy, RuntimeShort, QualifiedShort string
	Families                               []htmlFamily
	Checks                                 []htmlCheck
	NotApplicable                          []NotApplicable
}

// htmlFamily is one control family's cell of a row.
type htmlFamily struct {
	Summary, Class string
	Checks         []htmlCheck
}

type htmlCheck struct {
	Family, Name, Case, Result, Class, Detail string
}

type htmlCount struct {
	State, Class string
	N            int
}

type htmlPage struct {
	Title, Generated string
	Families         []string
	Span             int // columns in a row: the four row columns and one per family
	Rows             []htmlRow
	Counts           []htmlCount
	Disabled         []DisabledEntry
}

var page = template.Must(template.New("matrix").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:16px 20px;color:#222;font-size:13px}
h1{font-size:20px;margin:0 0 4px}
p.lede{margin:0 0 10px;color:#444;max-width:75em}
.counts span{margin-right:12px}
table.m{border-collapse:collapse;width:100%;table-layout:fixed}
table.m th,table.m td{border:1px solid #ccc;padding:4px 6px;vertical-align:top;overflow-wrap:anywhere}
table.m thead th{background:#f2f2f2;font-size:12px;text-align:left;font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
col.platform{width:19%}col.backend{width:10%}col.tier{width:8%}col.state{width:11%}col.environment{width:9%}
td.fam{text-align:center;padding:4px 3px}
td.pass{background:#dcf3d5}td.fail{background:#f6d2d2;font-weight:600}td.na{background:#eee;color:#555}td.none{color:#999}
td.fam summary{cursor:pointer;list-style:none}
td.fam ul{text-align:left;font-weight:normal;margin:4px 0 0;padding:0;list-style-position:inside;font-size:11px}
td.fam li{overflow-wrap:normal;word-break:normal;margin-bottom:2px}
li.pass::marker{content:"✓ ";color:#17661b}li.fail::marker{content:"✗ ";color:#a01010}li.na::marker{content:"– "}
tr.more td{border-top:none;background:#fafafa;font-size:12px;padding:2px 6px}
tr.more summary{cursor:pointer;color:#335}
table.d{border-collapse:collapse;width:100%;table-layout:fixed;margin:6px 0}
table.d td,table.d th{border:1px solid #ddd;padding:2px 4px;text-align:left;overflow-wrap:anywhere;font-weight:normal}
table.d col.n{width:30%}table.d col.c{width:9%}table.d col.r{width:6%}
dl{display:grid;grid-template-columns:max-content 1fr;gap:1px 10px;margin:4px 0}dt{color:#555}dd{margin:0;overflow-wrap:anywhere}
.current{color:#17661b;font-weight:600}.bad{color:#a01010;font-weight:600}.warn{color:#8a5a00;font-weight:600}
.sub{color:#666;font-size:12px;font-weight:normal}.nowrap{white-space:nowrap}
code{font-size:12px}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="lede">Generated {{.Generated}}. A row lets a release through only when it is authentic (signed by a trusted runner key),
every check passed, it is current, and its backend, runtime and platform are not disabled. Click a cell for its checks, or a row's details for everything it records.</p>
<p class="counts">{{len .Rows}} rows:{{range .Counts}} <span class="{{.Class}}">{{.N}} {{.State}}</span>{{end}}</p>
<table class="m">
<colgroup><col class="platform"><col class="backend"><col class="tier"><col class="state">{{range .Families}}<col class="{{.}}">{{end}}</colgroup>
<thead><tr><th>platform</th><th>backend</th><th>tier</th><th>state</th>{{range .Families}}<th title="{{.}}">{{.}}</th>{{end}}</tr></thead>
<tbody>
{{range .Rows}}<tr>
<td>{{if .OSArch}}{{.OSArch}} · {{.Kernel}}<br><span class="sub">{{.Distro}}</span>{{else}}<code>{{.File}}</code>{{end}}</td>
<td>{{.Backend}}<br><span class="sub">{{.RuntimeShort}}</span></td>
<td>{{.Tier}}</td>
<td class="{{.StateClass}}" title="{{.StateWhy}}">{{.State}}<br><span class="sub nowrap">{{.QualifiedShort}}</span></td>
{{range .Families}}<td class="fam {{.Class}}">{{if .Checks}}<details><summary>{{.Summary}}</summary><ul>{{range .Checks}}<li class="{{.Class}}" title="{{.Detail}}">{{.Name}}</li>{{end}}</ul></details>{{else}}{{.Summary}}{{end}}</td>
{{end}}</tr>
<tr class="more"><td colspan="{{$.Span}}"><details><summary>details: <code>{{.File}}</code>, {{.Auth}}</summary>
<dl>
{{if .StateWhy}}<dt>state</dt><dd class="{{.StateClass}}">{{.StateWhy}}</dd>{{end}}
<dt>result</dt><dd>{{.Result}}{{if .Missing}}, missing: {{.Missing}}{{end}}</dd>
<dt>qualified</dt><dd>{{.Qualified}} by custody {{.Custody}}, suite {{.Suite}}</dd>
<dt>runtime</dt><dd>{{.Runtime}} <code>sha256:{{.RuntimeSHA}}</code></dd>
<dt>platform</dt><dd>{{.OSArch}}, kernel {{.Kernel}}, {{.Distro}} <code>sha256:{{.PlatformDigest}}</code></dd>
<dt>cgroup</dt><dd>{{.Cgroup}}</dd>
<dt>facts</dt><dd>{{.Facts}}</dd>
</dl>
{{if .Checks}}<table class="d"><colgroup><col class="n"><col class="c"><col class="r"><col></colgroup>
<tr><th>check</th><th>case</th><th>result</th><th>detail</th></tr>
{{range .Checks}}<tr><td>{{.Family}}/{{.Name}}</td><td>{{.Case}}</td><td class="{{.Class}}">{{.Result}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>{{end}}
</details></td></tr>
{{end}}</tbody>
</table>
{{if .Disabled}}<h2>Disabled</h2><ul>{{range .Disabled}}<li><code>{{.Token}}</code> {{.Reason}}</li>{{end}}</ul>{{end}}
</body></html>
`))

// WriteHTML renders the matrix (one row per qualification row, one column
// per control family) as a self-contained HTML page.
func WriteHTML(w io.Writer, entries []Entry, opts HTMLOptions) error {
	if opts.Title == "" {
		opts.Title = "custody qualification matrix"
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	p := htmlPage{Title: opts.Title, Generated: opts.Now.UTC().Format(time.RFC3339), Families: RequiredFamilies}
	p.Span = 4 + len(p.Families)
	if opts.Disabled != nil {
		p.Disabled = opts.Disabled.Entries
	}
	for _, e := range entries {
		p.Rows = append(p.Rows, htmlRowOf(e, opts))
	}
	// Rows read by platform, then backend and tier, the newest first; a row
	// that does not decode says nothing of a platform and goes last.
	slices.SortStableFunc(p.Rows, func(a, b htmlRow) int {
		if (a.OSArch == "") != (b.OSArch == "") {
			if a.OSArch == "" {
				return 1
			}
			return -1
		}
		for _, c := range [][2]string{{a.OSArch, b.OSArch}, {a.Kernel, b.Kernel}, {a.Distro, b.Distro}, {a.Backend, b.Backend}, {a.Tier, b.Tier}} {
			if d := strings.Compare(c[0], c[1]); d != 0 {
				return d
			}
		}
		return strings.Compare(b.Qualified, a.Qualified)
	})
	counts := map[[2]string]int{}
	for _, r := range p.Rows {
		counts[[2]string{r.StateClass, r.State}]++
	}
	for k, n := range counts {
		p.Counts = append(p.Counts, htmlCount{Class: k[0], State: k[1], N: n})
	}
	slices.SortFunc(p.Counts, func(a, b htmlCount) int { // current first, then by how many
		if (a.Class == "current") != (b.Class == "current") {
			if a.Class == "current" {
				return -1
			}
			return 1
		}
		if a.N != b.N {
			return b.N - a.N
		}
		return strings.Compare(a.State, b.State)
	})
	return page.Execute(w, p)
}

func htmlRowOf(e Entry, opts HTMLOptions) htmlRow {
	r := htmlRow{File: filepath.Base(e.Path)}
	q := e.Qualification()
	switch {
	case e.Verified != nil:
		r.Auth = "signed by " + e.Verified.SignerID
	case e.Err != nil:
		r.Auth = "not verified: " + e.Err.Error()
	}
	if q == nil {
		r.State, r.StateClass, r.StateWhy = "unreadable", "bad", r.Auth
		for range RequiredFamilies {
			r.Families = append(r.Families, htmlFamily{Summary: "—", Class: "none"})
		}
		return r
	}
	pl := q.Platform
	r.OSArch, r.Backend = pl.OS+"/"+pl.Arch, pl.Backend
	r.Kernel, r.Distro = pl.Kernel, pl.Distro
	r.Cgroup = fmt.Sprintf("%s v2[%s] v1[%s]", pl.Cgroup.Mode, strings.Join(pl.Cgroup.V2Delegated, " "), strings.Join(pl.Cgroup.V1Usable, " "))
	r.Facts = fmt.Sprintf("seccomp=%t userns=%t tmpfs=%t overlay=%t", pl.Facts.Seccomp, pl.Facts.UserNS, pl.Facts.Tmpfs, pl.Facts.Overlay)
	r.Runtime, r.RuntimeSHA = "runc "+pl.Runtime.Version, pl.Runtime.SHA256
	if pl.Backend != string(backend.KindOCI) {
		// Another backend's runtime is its own identity, never runc.
		r.Runtime = pl.Runtime.Version
	}
	r.Tier, r.Custody, r.Suite = q.Tier, q.CustodyVersion, q.SuiteVersion
	r.Qualified, r.Result, r.PlatformDigest = q.QualifiedAt.Format(time.RFC3339), q.Result, pl.Digest()
	r.QualifiedShort = q.QualifiedAt.Format("2006-01-02 15:04Z")
	r.RuntimeShort, _, _ = strings.Cut(r.Runtime, ";")
	r.Missing = strings.Join(q.Missing, ", ")
	age := opts.Now.Sub(q.QualifiedAt)
	switch {
	case e.Verified == nil:
		r.State, r.StateClass, r.StateWhy = "not authentic", "bad", r.Auth
	case opts.Disabled.Why(pl) != "":
		r.State, r.StateClass, r.StateWhy = "disabled", "bad", opts.Disabled.Why(pl)
	case !q.AllPassed():
		r.State, r.StateClass = "failed", "bad"
	case q.Measured == nil:
		r.State, r.StateClass, r.StateWhy = "not measured", "bad", "its verdicts were handed to the runner to sign (an older row format); no gate admits it"
	case age > opts.MaxAge:
		r.State, r.StateClass = "stale", "warn"
	case age < -maxClockSkew:
		r.State, r.StateClass = "dated in the future", "warn"
	default:
		r.State, r.StateClass = "current", "current"
	}
	for _, c := range q.Checks {
		hc := htmlCheck{Family: c.Family, Name: c.Name, Case: c.Case, Result: "pass", Class: "pass", Detail: c.Detail}
		if !c.Passed {
			hc.Result, hc.Class = "FAIL", "fail"
		}
		r.Checks = append(r.Checks, hc)
	}
	for _, n := range q.NotApplicable {
		r.Checks = append(r.Checks, htmlCheck{Family: n.Family, Name: n.Name, Result: "n/a", Class: "na", Detail: "not applicable: " + n.Reason})
	}
	for _, f := range RequiredFamilies {
		r.Families = append(r.Families, familyCell(f, r.Checks, q.Missing))
	}
	return r
}

// familyCell sums up one family's checks: FAIL when one failed or a
// required case is missing, pass when every check run passed, n/a when
// none ran and some do not apply.
func familyCell(family string, checks []htmlCheck, missing []string) htmlFamily {
	cell := htmlFamily{}
	var run, failed, na int
	for _, c := range checks {
		if c.Family != family {
			continue
		}
		cell.Checks = append(cell.Checks, c)
		switch c.Class {
		case "na":
			na++
		case "fail":
			run++
			failed++
		default:
			run++
		}
	}
	var lacks []string
	for _, k := range []string{CaseLegitimate, CaseRefusal} {
		if slices.Contains(missing, family+"/"+k) {
			lacks = append(lacks, k)
		}
	}
	switch {
	case failed > 0:
		cell.Summary, cell.Class = fmt.Sprintf("FAIL %d/%d", failed, run), "fail"
	case len(lacks) > 0:
		cell.Summary, cell.Class = "no "+strings.Join(lacks, "/")+" case", "fail"
	case run > 0:
		cell.Summary, cell.Class = fmt.Sprintf("pass %d", run), "pass"
		if na > 0 {
			cell.Summary += fmt.Sprintf(" +%d n/a", na)
		}
	case na > 0:
		cell.Summary, cell.Class = "n/a", "na"
	default:
		cell.Summary, cell.Class = "—", "none"
	}
	return cell
}
