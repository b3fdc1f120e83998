// Package quote makes untrusted strings safe to print for a human: a file
// name, path or message that came from a workload, a request or the
// daemon must not move the cursor, clear the screen, retitle the window or
// pass for a line custody printed itself.
//
// There is one escape, strconv.Quote's, and two triggers. String is for a
// single value (a file name, a path, an id): it is quoted whenever it could
// be misread, so a quoted name and a plain one never look alike. Message is
// for text custody composed around such values (a check's detail, a
// failure's reason, an error), whose authors already quote the values they
// embed: it is left alone unless it still holds something a terminal
// would act on, and then quoted whole. JSON output needs neither: the
// encoder escapes every control character.
package quote

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s as is when it is plain, and strconv.Quote(s) when it is
// empty, is not valid UTF-8, or holds a backslash, a double quote, or any
// character strconv.IsPrint rejects: C0 and C1 controls (newline, carriage
// return, escape, ...), DEL, and non-printing format characters such as
// bidirectional overrides and zero-width spaces.
func String(s string) string {
	if s == "" || !utf8.ValidString(s) || strings.ContainsAny(s, `\"`) || hasUnprintable(s) {
		return strconv.Quote(s)
	}
	return s
}

// Message returns s as is unless it is not valid UTF-8 or holds a
// character strconv.IsPrint rejects, and then strconv.Quote(s). Quotes and
// backslashes alone leave it plain: they are how the values inside it were
// quoted. A newline is unprintable, so a multi-line s comes out on one line;
// use Lines for text whose lines custody composed.
func Message(s string) string {
	if !utf8.ValidString(s) || hasUnprintable(s) {
		return strconv.Quote(s)
	}
	return s
}

// Lines applies Message to each line of s, for text custody composes one
// item per line (a validation error lists one problem a line). Each line is
// safe; a newline that came from an unquoted value still starts a line.
func Lines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Message(l)
	}
	return strings.Join(lines, "\n")
}

func hasUnprintable(s string) bool {
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return true
		}
	}
	return false
}
