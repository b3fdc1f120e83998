package procfs

import (
	"errors"
	"os"
	"slices"
	"testing"
)

const statLine = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 987654 1000000 100 18446744073709551615\n"

func TestParseStat(t *testing.T) {
	st, err := ParseStat([]byte(statLine))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{State: 'S', UTime: 7, STime: 3, CUTime: 2, CSTime: 1, StartTime: "987654"}
	if st != want {
		t.Errorf("ParseStat = %+v, want %+v", st, want)
	}
	for _, bad := range []string{
		"",
		"1234 no parens S 1",
		"1234 (x) S 1 2 3", // too few fields
		"1234 (x) SS 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 987654 1", // state not one letter
		"1234 (x) S 1 1234 1234 0 -1 4194560 100 0 0 0 x 3 2 1 20 0 1 0 987654 1",  // utime
		"1234 (x) S 1 1234 1234 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 -9 1",      // starttime
	} {
		if _, err := ParseStat([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseStat(%q): err = %v, want ErrMalformed", bad, err)
		}
	}
}

// TestReadStatSelf reads this process's real stat file: running, and the
// same start time twice.
func TestReadStatSelf(t *testing.T) {
	a, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadStat(os.Getpid())
	if err != nil || a.StartTime != b.StartTime || a.StartTime == "" {
		t.Errorf("start time %q then %q (%v)", a.StartTime, b.StartTime, err)
	}
	if a.State == 'Z' {
		t.Errorf("state %c", a.State)
	}
	if _, err := ReadStat(-1); err == nil {
		t.Error("ReadStat(-1): no error")
	}
}

func TestParseStatus(t *testing.T) {
	st := ParseStatus([]byte("Name:\tcat\nCapInh:\t0000000000000000\nCapEff:\t00000000a80425fb\n" +
		"NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\nSpeculation_Store_Bypass:\tthread vulnerable\n"))
	if st.Caps["CapEff"] != "00000000a80425fb" || st.Caps["CapInh"] != "0000000000000000" || len(st.Caps) != 2 ||
		st.NoNewPrivs != 1 || st.Seccomp != 2 || st.SeccompFilters != 1 {
		t.Errorf("ParseStatus = %+v", st)
	}
	st = ParseStatus([]byte("Name: x\nSeccomp:\tlots\nNoNewPrivs:\t-3\n"))
	if st.NoNewPrivs != -1 || st.Seccomp != -1 || st.SeccompFilters != -1 || len(st.Caps) != 0 {
		t.Errorf("ParseStatus of nothing usable = %+v", st)
	}
}

func TestParseNetDev(t *testing.T) {
	dev := "Inter-|   Receive\n face |bytes\n  lo: 0 0\n eth0: 1 2\n"
	if got := ParseNetDev([]byte(dev)); !slices.Equal(got, []string{"eth0", "lo"}) {
		t.Errorf("ParseNetDev = %q", got)
	}
}

func TestParseCgroup(t *testing.T) {
	got := ParseCgroup([]byte("12:memory:/custody-x/abc\n0::/\n3:cpu,cpuacct:/a/../../etc\n4:pids:relative\n"))
	if len(got) != 2 || got[0] != (Cgroup{"memory", "/custody-x/abc"}) || got[1] != (Cgroup{"", "/"}) {
		t.Errorf("%+v", got)
	}
}
