package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// Verdicts of a row.
const (
	VerdictMet         = "met"
	VerdictMissed      = "MISSED"
	VerdictInfo        = "info"
	VerdictUnavailable = "UNAVAILABLE"
	VerdictNotMeasured = "not measured yet"
	VerdictFailed      = "FAILED"
	// VerdictNoisy: other load on the machine was over 10% around the
	// measurement; the figures are reported and never count as met.
	VerdictNoisy = "noisy"
)

// Row is one line of the result table: a custody figure next to its
// baseline measured in the same run, and their ratio.
type Row struct {
	// ID groups rows by the measurement they belong to ("1", "2", ...).
	ID     string `json:"id"`
	Metric string `json:"metric"`
	Unit   string `json:"unit,omitempty"`
	// Value is custody's figure; nil when it was not measured.
	Value *float64 `json:"value,omitempty"`
	// Baseline names what Value is compared with; BaselineValue is its
	// figure from the same run.
	Baseline      string   `json:"baseline,omitempty"`
	BaselineValue *float64 `json:"baselineValue,omitempty"`
	// Ratio is the figure the target is stated in (see RatioText for its
	// sense, e.g. "1.10× runc" or "6.3× faster").
	Ratio     *float64 `json:"ratio,omitempty"`
	RatioText string   `json:"ratioText,omitempty"`
	Target    string   `json:"target,omitempty"`
	Verdict   string   `json:"verdict"`
	// N is the number of samples behind each figure, where it applies.
	N    int    `json:"n,omitempty"`
	Note string `json:"note,omitempty"`
}

// F returns a pointer to v, for Row's optional figures.
func F(v float64) *float64 { return &v }

// Report is the whole result of one bench run.
type Report struct {
	Started  time.Time         `json:"started"`
	Finished time.Time         `json:"finished"`
	Host     map[string]string `json:"host"`
	Rows     []Row             `json:"rows"`
	Notes    []string          `json:"notes,omitempty"`
}

// Add appends rows.
func (r *Report) Add(rows ...Row) { r.Rows = append(r.Rows, rows...) }

// MarkNoisy turns the verdict of every row judged against its target (met
// or missed) into noisy: figures taken while other work loaded the machine
// never count. The note keeps what the verdict would have been.
func (r *Report) MarkNoisy(why string) {
	for i := range r.Rows {
		x := &r.Rows[i]
		if x.Verdict != VerdictMet && x.Verdict != VerdictMissed {
			continue
		}
		x.Note = strings.TrimPrefix(x.Note+"; ", "; ") + fmt.Sprintf("noisy (%s): on these figures it would read %s", why, x.Verdict)
		x.Verdict = VerdictNoisy
	}
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func fmtNum(v *float64, unit string) string {
	if v == nil {
		return "—"
	}
	x := *v
	var s string
	switch {
	case x == 0:
		s = "0"
	case x >= 1000:
		s = fmt.Sprintf("%.0f", x)
	case x >= 100:
		s = fmt.Sprintf("%.1f", x)
	case x >= 10:
		s = fmt.Sprintf("%.2f", x)
	default:
		s = fmt.Sprintf("%.3g", x)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

// Print writes the table as aligned text.
func (r *Report) Print(w io.Writer) {
	head := []string{"#", "measurement", "custody", "baseline (same run)", "ratio", "target", "verdict"}
	rows := [][]string{head}
	for _, x := range r.Rows {
		base := x.Baseline
		if x.BaselineValue != nil {
			base += " " + fmtNum(x.BaselineValue, x.Unit)
		}
		val := fmtNum(x.Value, x.Unit)
		if x.Value == nil && (x.Verdict == VerdictUnavailable || x.Verdict == VerdictNotMeasured || x.Verdict == VerdictFailed) {
			val = "—"
		}
		metric := x.Metric
		if x.N > 0 {
			metric += fmt.Sprintf(" (n=%d)", x.N)
		}
		rows = append(rows, []string{x.ID, metric, val, strings.TrimSpace(base), x.RatioText, x.Target, x.Verdict})
	}
	width := make([]int, len(head))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(c)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(rows[0])
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	prev := ""
	for _, row := range rows[1:] {
		if prev != "" && row[0] != prev {
			fmt.Fprintln(w)
		}
		prev = row[0]
		line(row)
	}
	for _, x := range r.Rows {
		if x.Note != "" && (x.Verdict == VerdictUnavailable || x.Verdict == VerdictFailed) {
			fmt.Fprintf(w, "\n!!! %s %s: %s: %s\n", x.ID, x.Metric, x.Verdict, x.Note)
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.Notes {
			fmt.Fprintln(w, "note: "+n)
		}
	}
}
