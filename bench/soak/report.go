package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// KindCount is what one kind of traffic came to.
type KindCount struct {
	Runs int `json:"runs"`
	// Unexpected outcomes: failures nobody asked for.
	Unexpected int `json:"unexpected"`
	// ChaosHit: failed while chaos struck (allowed; checked afterwards).
	ChaosHit int `json:"chaosHit"`
}

// StoreReport is the store before and after a retention pass.
type StoreReport struct {
	Before, After               StoreStats
	OutputsBefore, OutputsAfter int64
	StateBefore, StateAfter     int64
}

// Report is a soak's outcome.
type Report struct {
	Options Options `json:"-"`
	Elapsed time.Duration
	Phases  int
	Counts  map[Kind]*KindCount
	// Chaos counts each kind of chaos that struck; ChaosErrors are the
	// ones that could not be done.
	Chaos       map[string]int
	ChaosErrors []string
	// ChaosFrom is when chaos began (the second half of the run); 0
	// without chaos.
	ChaosFrom time.Duration
	Samples   []Sample
	End       Sample
	// Failures are the unasked-for failures, one line each.
	Failures []string
	Notes    []string
	// Relaunched counts grants a chaos-interrupted phase never got to
	// consume that then launched when submitted again (once).
	Relaunched     int
	DoubleLaunches int
	Attempts       int
	// UncleanAttempts are journalled attempts not clean at the end.
	UncleanAttempts                  []string
	ReceiptsVerified, ReceiptsFailed int
	ReceiptsRechecked                int
	ReceiptsLost, ReceiptsChanged    []string
	Store                            StoreReport
}

// flatSlack is the constant a curve may grow by after warm-up, beside 10%.
var flatSlack = map[string]float64{
	RSS: 16 << 20, FDs: 16, Goroutines: 32,
}

// leakCurves must be back at their start values at the end.
var leakCurves = []string{Procs, Mounts, Cgroups, Netns, Containers, Unclean}

// Verdict is one must-hold property.
type Verdict struct {
	Name   string
	Held   bool
	Detail string
	// NotJudged: the run was too short to judge it (Held is then
	// meaningless and the soak's outcome does not depend on it).
	NotJudged bool
}

func verdictOf(name string, held bool, detail string) Verdict {
	return Verdict{Name: name, Held: held, Detail: detail}
}

// MinFlatStretch is the shortest undisturbed stretch flatness is judged
// over: in less, custodyd's heap is still growing to its working size
// (the warm-up alone is a fifth of the stretch).
const MinFlatStretch = 5 * time.Minute

// point returns the value of curve at sample i, and whether it was read.
func (r *Report) point(i int, curve string) (float64, bool) {
	if i < 0 || i >= len(r.Samples) {
		return 0, false
	}
	v, ok := r.Samples[i].Values[curve]
	return v, ok
}

// middle is the sample nearest half the elapsed time.
func (r *Report) middle() int {
	best, bd := 0, time.Duration(1<<62)
	for i, s := range r.Samples {
		if d := (s.At - r.Elapsed/2).Abs(); d < bd {
			best, bd = i, d
		}
	}
	return best
}

// flat judges a curve after warm-up, over the stretch custodyd ran
// uninterrupted (the whole run, or the half before chaos began): warm-up
// is the stretch's first fifth (at least two samples), and the highest
// value in the stretch's last third must stay within max(warm × 1.1,
// warm + slack), warm being the highest value in the warm-up.
func (r *Report) flat(curve string, slack float64) (held bool, warm, late, bound float64, ok bool) {
	span, samples := r.Elapsed, r.Samples
	if r.ChaosFrom > 0 {
		span = r.ChaosFrom
		i := 0
		for i < len(samples) && samples[i].At < span {
			i++
		}
		samples = samples[:i]
	}
	n := len(samples)
	if n < 4 {
		return false, 0, 0, 0, false
	}
	cut := span / 5
	wn := 0
	for i, s := range samples {
		if s.At > cut && i >= 2 {
			break
		}
		if v, ok := s.Values[curve]; ok {
			warm = max(warm, v)
		}
		wn = i + 1
	}
	for _, s := range samples[max(wn, n-n/3):] {
		if v, ok := s.Values[curve]; ok {
			late = max(late, v)
		}
	}
	bound = max(warm*1.1, warm+slack)
	return late <= bound, warm, late, bound, true
}

// Verdicts judges every must-hold property.
func (r *Report) Verdicts() []Verdict {
	var vs []Verdict
	vs = append(vs, verdictOf("0 unasked failures", len(r.Failures) == 0 && len(r.ChaosErrors) == 0,
		fmt.Sprintf("%d unasked failures, %d chaos actions that could not be done", len(r.Failures), len(r.ChaosErrors))))
	var leaks []string
	for _, c := range leakCurves {
		s, ok1 := r.point(0, c)
		e, ok2 := r.End.Values[c]
		switch {
		case !ok1 || !ok2:
			leaks = append(leaks, c+" unread")
		case e > s:
			leaks = append(leaks, fmt.Sprintf("%s %g → %g", c, s, e))
		}
	}
	if len(r.UncleanAttempts) > 0 {
		leaks = append(leaks, fmt.Sprintf("%d journalled attempts not clean", len(r.UncleanAttempts)))
	}
	vs = append(vs, verdictOf("0 leaks at the end (against the start)", len(leaks) == 0, orNone(leaks)))
	rec := fmt.Sprintf("%d verified, %d failed; %d fetched again at the end: %d lost, %d changed",
		r.ReceiptsVerified, r.ReceiptsFailed, r.ReceiptsRechecked, len(r.ReceiptsLost), len(r.ReceiptsChanged))
	vs = append(vs, verdictOf("every receipt verifies", r.ReceiptsVerified > 0 && r.ReceiptsFailed == 0 &&
		len(r.ReceiptsLost) == 0 && len(r.ReceiptsChanged) == 0, rec))
	vs = append(vs, verdictOf("no grant launched twice", r.DoubleLaunches == 0,
		fmt.Sprintf("%d grants with more than one attempt among %d journalled attempts; %d chaos-interrupted grants launched on a second submit (never consumed before)", r.DoubleLaunches, r.Attempts, r.Relaunched)))
	var bent []string
	for _, c := range []string{RSS, FDs, Goroutines} {
		held, warm, late, bound, ok := r.flat(c, flatSlack[c])
		if !ok {
			bent = append(bent, c+": too few samples")
		} else if !held {
			bent = append(bent, fmt.Sprintf("%s: %s after warm-up, bound %s (warm-up %s)", c, fmtVal(c, late), fmtVal(c, bound), fmtVal(c, warm)))
		}
	}
	flat := Verdict{Name: "curves flat after warm-up", Held: len(bent) == 0, Detail: orNone(bent)}
	if stretch := r.stretch(); stretch < MinFlatStretch {
		flat.NotJudged = true
		flat.Detail = fmt.Sprintf("the undisturbed stretch (%s) is shorter than %s; as measured: %s", stretch.Round(time.Second), MinFlatStretch, flat.Detail)
	}
	vs = append(vs, flat)
	st := r.Store
	bounded := st.Before.Err == "" && st.After.Err == "" && st.After.LiveBytes < st.Before.LiveBytes &&
		(st.OutputsBefore == 0 || st.OutputsAfter < st.OutputsBefore)
	vs = append(vs, verdictOf("store bounded by retention", bounded, fmt.Sprintf(
		"store data (compacted) %s → %s, store file %s → %s, outputs %s → %s, state dir %s → %s%s",
		mib(st.Before.LiveBytes), mib(st.After.LiveBytes), mib(st.Before.FileBytes), mib(st.After.FileBytes),
		mib(st.OutputsBefore), mib(st.OutputsAfter), mib(st.StateBefore), mib(st.StateAfter),
		errNote(st.Before.Err, st.After.Err))))
	return vs
}

// stretch is how long custodyd ran undisturbed: the whole run, or until
// chaos began.
func (r *Report) stretch() time.Duration {
	if r.ChaosFrom > 0 {
		return r.ChaosFrom
	}
	return r.Elapsed
}

// Held says every verdict that was judged held.
func (r *Report) Held() bool {
	for _, v := range r.Verdicts() {
		if !v.Held && !v.NotJudged {
			return false
		}
	}
	return true
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

func errNote(errs ...string) string {
	var out []string
	for _, e := range errs {
		if e != "" {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func fmtVal(curve string, v float64) string {
	switch curve {
	case RSS, StoreBytes, OutBytes, StateBytes:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%g", v)
}

// Print writes the report for an operator.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "soak: %d phases in %s at concurrency %d (%.1f phases/s)\n\n", r.Phases, r.Elapsed.Round(time.Second),
		r.Options.Concurrency, float64(r.Phases)/max(r.Elapsed.Seconds(), 1))
	fmt.Fprintf(w, "%-14s %6s %10s %11s\n", "traffic", "runs", "unasked", "chaos-hit")
	kinds := make([]Kind, 0, len(r.Counts))
	for k := range r.Counts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		c := r.Counts[k]
		fmt.Fprintf(w, "%-14s %6d %10d %11d\n", k, c.Runs, c.Unexpected, c.ChaosHit)
	}
	if len(r.Chaos) > 0 || len(r.ChaosErrors) > 0 {
		fmt.Fprintf(w, "\nchaos:\n")
		names := make([]string, 0, len(r.Chaos))
		for n := range r.Chaos {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-46s %d\n", n, r.Chaos[n])
		}
		for _, e := range r.ChaosErrors {
			fmt.Fprintf(w, "  could not: %s\n", e)
		}
	}
	mid := r.middle()
	fmt.Fprintf(w, "\n%-18s %14s %14s %14s   (start at %s, middle at %s/%d phases, end at %s)\n", "curve", "start", "middle", "end",
		r.at(0), r.at(mid), r.Samples[mid].Phases, r.End.At.Round(time.Second))
	for _, c := range curveNames {
		val := func(v float64, ok bool) string {
			if !ok {
				return "unread"
			}
			return fmtVal(c, v)
		}
		s, ok0 := r.point(0, c)
		m, ok1 := r.point(mid, c)
		e, ok2 := r.End.Values[c]
		fmt.Fprintf(w, "%-18s %14s %14s %14s\n", c, val(s, ok0), val(m, ok1), val(e, ok2))
	}
	fmt.Fprintf(w, "\nmust hold:\n")
	for _, v := range r.Verdicts() {
		mark := "HELD  "
		switch {
		case v.NotJudged:
			mark = "NOT JUDGED"
		case !v.Held:
			mark = "FAILED"
		}
		fmt.Fprintf(w, "  %s %s: %s\n", mark, v.Name, v.Detail)
	}
	show := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s (%d):\n", title, len(lines))
		for i, l := range lines {
			if i == 20 {
				fmt.Fprintf(w, "  … %d more\n", len(lines)-20)
				break
			}
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	show("unasked failures", r.Failures)
	show("attempts not clean at the end", r.UncleanAttempts)
	show("receipts lost", r.ReceiptsLost)
	show("receipts changed", r.ReceiptsChanged)
	// What chaos struck when comes last: the other notes are the news.
	notes := slices.Clone(r.Notes)
	slices.SortStableFunc(notes, func(a, b string) int {
		ca, cb := strings.HasPrefix(a, "chaos at "), strings.HasPrefix(b, "chaos at ")
		switch {
		case ca == cb:
			return 0
		case cb:
			return -1
		}
		return 1
	})
	show("notes", notes)
}

func (r *Report) at(i int) string {
	if i < 0 || i >= len(r.Samples) {
		return "-"
	}
	return r.Samples[i].At.Round(time.Second).String()
}

// WriteJSON writes every sample and count, for plotting.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
