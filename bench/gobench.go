package bench

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// GoBench is one result line of `go test -bench`.
type GoBench struct {
	Name       string // without the -GOMAXPROCS suffix
	Iterations int64
	// Metrics by unit: "ns/op", "B/op", "allocs/op", and custom ones.
	Metrics map[string]float64
}

// ParseGoBench reads the result lines of `go test -bench` output.
func ParseGoBench(r io.Reader) map[string]GoBench {
	out := map[string]GoBench{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := GoBench{Name: name, Iterations: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			b.Metrics[f[i+1]] = v
		}
		out[name] = b
	}
	return out
}
