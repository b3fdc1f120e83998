package matrix

import (
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// HTMLOptions configure WriteHTML.
type HTMLOptions struct {
	Title    string
	Now      time.Time
	MaxAge   time.Duration
	Disabled *Disabled
}

type htmlRow struct {
	File, State, StateClass, Auth              string
	Platform, Kernel, Distro, Cgroup, Facts    string
	Runtime, RuntimeSHA, Tier, Custody, Suite  string
	Qualified, Result, PlatformDigest, Missing string
	Cells                                      []htmlCell
}

type htmlCell struct {
	Text, Class, Title string
}

type htmlColumn struct {
	Family, Name, Case string
}

type htmlPage struct {
	Title, Generated string
	Columns          []htmlColumn
	Rows             []htmlRow
	Disabled         []DisabledEntry
}

var page = template.Must(template.New("matrix").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
th.check{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;font-weight:normal}
td.pass{background:#d8f5d0;text-align:center}
td.fail{background:#f8d0d0;text-align:center;font-weight:bold}
td.none{color:#999;text-align:center}
.current{color:#17661b;font-weight:bold}.bad{color:#a01010;font-weight:bold}.warn{color:#8a5a00;font-weight:bold}
code{font-size:12px}
</style></head><body>
<h1>{{.Title}}</h1>
<p>Generated {{.Generated}}. A row lets a release through only when it is authentic (signed by a trusted runner key),
every check passed, it is current, and its backend, runtime and platform are not disabled.</p>
<table>
<tr><th>row</th><th>state</th><th>platform</th><th>runtime</th><th>tier</th><th>custody</th><th>qualified</th><th>result</th>
{{range .Columns}}<th class="check" title="{{.Case}}">{{.Family}}/{{.Name}}</th>{{end}}</tr>
{{range .Rows}}<tr>
<td><code>{{.File}}</code><br><small>platform sha256:{{.PlatformDigest}}</small></td>
<td class="{{.StateClass}}">{{.State}}<br><small>{{.Auth}}</small></td>
<td>{{.Platform}}<br>kernel {{.Kernel}}<br>{{.Distro}}<br>cgroup {{.Cgroup}}<br><small>{{.Facts}}</small></td>
<td>{{.Runtime}}<br><small><code>{{.RuntimeSHA}}</code></small></td>
<td>{{.Tier}}</td><td>{{.Custody}}<br><small>suite {{.Suite}}</small></td><td>{{.Qualified}}</td>
<td>{{.Result}}{{if .Missing}}<br><small>missing: {{.Missing}}</small>{{end}}</td>
{{range .Cells}}<td class="{{.Class}}" title="{{.Title}}">{{.Text}}</td>{{end}}
</tr>{{end}}
</table>
{{if .Disabled}}<h2>Disabled</h2><ul>{{range .Disabled}}<li><code>{{.Token}}</code> {{.Reason}}</li>{{end}}</ul>{{end}}
</body></html>
`))

// WriteHTML renders the matrix — platforms × checks — as a self-contained
// HTML page.
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
	p := htmlPage{Title: opts.Title, Generated: opts.Now.UTC().Format(time.RFC3339)}
	if opts.Disabled != nil {
		p.Disabled = opts.Disabled.Entries
	}
	cols := map[string]htmlColumn{}
	for _, e := range entries {
		if q := e.Qualification(); q != nil {
			for _, c := range q.Checks {
				cols[c.TestName()] = htmlColumn{Family: c.Family, Name: c.Name, Case: c.Case}
			}
			for _, n := range q.NotApplicable {
				if _, ok := cols[n.Family+"/"+n.Name]; !ok {
					cols[n.Family+"/"+n.Name] = htmlColumn{Family: n.Family, Name: n.Name}
				}
			}
		}
	}
	famIndex := func(f string) int {
		if i := slices.Index(RequiredFamilies, f); i >= 0 {
			return i
		}
		return len(RequiredFamilies)
	}
	for _, c := range cols {
		p.Columns = append(p.Columns, c)
	}
	slices.SortFunc(p.Columns, func(a, b htmlColumn) int {
		if d := famIndex(a.Family) - famIndex(b.Family); d != 0 {
			return d
		}
		if a.Case != b.Case { // legitimate work first, then the refusals
			if a.Case == CaseLegitimate {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, e := range entries {
		p.Rows = append(p.Rows, htmlRowOf(e, p.Columns, opts))
	}
	slices.SortStableFunc(p.Rows, func(a, b htmlRow) int {
		if c := strings.Compare(a.PlatformDigest, b.PlatformDigest); c != 0 {
			return c
		}
		if c := strings.Compare(a.Tier, b.Tier); c != 0 {
			return c
		}
		return strings.Compare(b.Qualified, a.Qualified)
	})
	return page.Execute(w, p)
}

func htmlRowOf(e Entry, cols []htmlColumn, opts HTMLOptions) htmlRow {
	r := htmlRow{File: filepath.Base(e.Path)}
	q := e.Qualification()
	switch {
	case e.Verified != nil:
		r.Auth = "signed by " + e.Verified.SignerID
	case e.Err != nil:
		r.Auth = "not verified: " + e.Err.Error()
	}
	if q == nil {
		r.State, r.StateClass = "unreadable", "bad"
		for range cols {
			r.Cells = append(r.Cells, htmlCell{Text: "—", Class: "none"})
		}
		return r
	}
	pl := q.Platform
	r.Platform = pl.OS + "/" + pl.Arch + " " + pl.Backend
	r.Kernel, r.Distro = pl.Kernel, pl.Distro
	r.Cgroup = fmt.Sprintf("%s v2[%s] v1[%s]", pl.Cgroup.Mode, strings.Join(pl.Cgroup.V2Delegated, " "), strings.Join(pl.Cgroup.V1Usable, " "))
	r.Facts = fmt.Sprintf("seccomp=%t userns=%t tmpfs=%t overlay=%t", pl.Facts.Seccomp, pl.Facts.UserNS, pl.Facts.Tmpfs, pl.Facts.Overlay)
	r.Runtime, r.RuntimeSHA = "runc "+pl.Runtime.Version, pl.Runtime.SHA256
	if pl.Backend != BackendOCI {
		// Another backend's runtime is its own identity, never runc.
		r.Runtime = pl.Runtime.Version
	}
	r.Tier, r.Custody, r.Suite = q.Tier, q.CustodyVersion, q.SuiteVersion
	r.Qualified, r.Result, r.PlatformDigest = q.QualifiedAt.Format(time.RFC3339), q.Result, pl.Digest()
	r.Missing = strings.Join(q.Missing, ", ")
	age := opts.Now.Sub(q.QualifiedAt)
	switch {
	case e.Verified == nil:
		r.State, r.StateClass = "not authentic", "bad"
	case opts.Disabled.Why(pl) != "":
		r.State, r.StateClass = opts.Disabled.Why(pl), "bad"
	case !q.AllPassed():
		r.State, r.StateClass = "failed", "bad"
	case age > opts.MaxAge:
		r.State, r.StateClass = "stale", "warn"
	case age < -maxClockSkew:
		r.State, r.StateClass = "dated in the future", "warn"
	default:
		r.State, r.StateClass = "current", "current"
	}
	byName := map[string]Check{}
	for _, c := range q.Checks {
		byName[c.TestName()] = c
	}
	notApplicable := map[string]string{}
	for _, n := range q.NotApplicable {
		notApplicable[n.Family+"/"+n.Name] = n.Reason
	}
	for _, col := range cols {
		c, ok := byName[col.Family+"/"+col.Name]
		why, na := notApplicable[col.Family+"/"+col.Name]
		switch {
		case !ok && na:
			r.Cells = append(r.Cells, htmlCell{Text: "n/a", Class: "none", Title: "not applicable: " + why})
		case !ok:
			r.Cells = append(r.Cells, htmlCell{Text: "—", Class: "none", Title: "not run"})
		case c.Passed:
			r.Cells = append(r.Cells, htmlCell{Text: "pass", Class: "pass", Title: c.Detail})
		default:
			r.Cells = append(r.Cells, htmlCell{Text: "FAIL", Class: "fail", Title: c.Detail})
		}
	}
	return r
}
