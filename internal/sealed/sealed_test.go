package sealed

import (
	"testing"
)

// FuzzParse: Parse never panics, and what it accepts it writes back the
// same way (String), so a parsed identity names one file only.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"65024:10527695:2514468202:2015232:1796146518188733095:1796146518188733095", "0:0:0:0:0:0", "1:2:3", "1:2:4294967296:0:0:0", "-1:0:0:0:0:0", "1:2:3:9223372036854775808:0:0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(id.String())
		if err != nil || again != id {
			t.Fatalf("Parse(%q) = %+v, which reparses as %+v, %v", s, id, again, err)
		}
		if id.Size < 0 || id.Mtime < 0 || id.Ctime < 0 {
			t.Fatalf("Parse(%q) accepted a negative field: %+v", s, id)
		}
	})
}

func TestParse(t *testing.T) {
	id := Identity{Dev: 1, Ino: 2, Generation: 3, Size: 4, Mtime: 5, Ctime: 6}
	if got, err := Parse(id.String()); err != nil || got != id {
		t.Fatalf("Parse(%q) = %+v, %v", id.String(), got, err)
	}
	for _, bad := range []string{"", "1:2:3:4:5", "1:2:3:4:5:6:7", "1:2:4294967296:4:5:6", "1:2:3:-4:5:6", "1:2:3:9223372036854775808:5:6", "a:2:3:4:5:6"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
