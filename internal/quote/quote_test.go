package quote

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	cases := []struct{ in, want string }{
		{"artifact.txt", "artifact.txt"},
		{"dir/with space.txt", "dir/with space.txt"},
		{"héllo", "héllo"},
		{"", `""`},
		{"a\nb", `"a\nb"`},
		{"\x1b[2J", `"\x1b[2J"`},
		{"back\rspace", `"back\rspace"`},
		{"tab\there", `"tab\there"`},
		{"bell\a", `"bell\a"`},
		{"del\x7f", `"del\x7f"`},
		{"c1\u009b31m", `"c1\u009b31m"`},
		{"rtl\u202eexe.txt", `"rtl\u202eexe.txt"`},
		{"zero\u200bwidth", `"zero\u200bwidth"`},
		{"bad\xffutf8", `"bad\xffutf8"`},
		{`back\slash`, `"back\\slash"`},
		{`say "hi"`, `"say \"hi\""`},
	}
	for _, c := range cases {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestMessage(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{`missing: "a\nb"`, `missing: "a\nb"`}, // already quoted inside: left alone
		{"output custody: /out/\x1b[2J is a fifo", `"output custody: /out/\x1b[2J is a fifo"`},
		{"two\nlines", `"two\nlines"`},
		{"bad\xff", `"bad\xff"`},
	}
	for _, c := range cases {
		if got := Message(c.in); got != c.want {
			t.Errorf("Message(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestLines(t *testing.T) {
	in := "policy: /a: unknown field \"x\"\npolicy: /\x1b[2J: unknown\n"
	want := "policy: /a: unknown field \"x\"\n\"policy: /\\x1b[2J: unknown\"\n"
	if got := Lines(in); got != want {
		t.Errorf("Lines = %q, want %q", got, want)
	}
}

// Nothing any function returns holds a byte a terminal acts on.
func FuzzSafe(f *testing.F) {
	f.Add("a\x1b[2J\r\n\u202e\xff")
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{String(s), Message(s)} {
			if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }); i >= 0 {
				t.Fatalf("%q: output %q holds a control character at %d", s, out, i)
			}
		}
		for _, l := range strings.Split(Lines(s), "\n") {
			if Message(l) != l {
				t.Fatalf("%q: line %q of Lines is not safe", s, l)
			}
		}
	})
}
