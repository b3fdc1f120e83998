package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/custody-dev/custody/admission"
)

// A credential source is read only when it is a regular, root-owned 0600
// file reached without a link; everything else is refused.
func TestReadSource(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := readSource(good); err != nil || string(v) != "s3cret" {
		t.Fatalf("legitimate source: %q %v", v, err)
	}
	link := filepath.Join(dir, "link")
	must(t, os.Symlink(good, link))
	wide := filepath.Join(dir, "wide")
	must(t, os.WriteFile(wide, []byte("x"), 0o644))
	must(t, os.Chmod(wide, 0o644))
	user := filepath.Join(dir, "user")
	must(t, os.WriteFile(user, []byte("x"), 0o600))
	must(t, os.Chown(user, 1000, 1000))
	big := filepath.Join(dir, "big")
	must(t, os.WriteFile(big, make([]byte, maxCredential+1), 0o600))
	for name, path := range map[string]string{"symlink": link, "0644": wide, "not root's": user, "a directory": dir, "too large": big, "missing": filepath.Join(dir, "nope")} {
		if _, err := readSource(path); err == nil {
			t.Errorf("%s source accepted", name)
		}
	}
}

// A credential file is created with its final mode and owner, never over
// an existing file or through a link.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cred")
	must(t, writeFile(path, []byte("v"), 0o400, 999, 998))
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o400 || st.Uid != 999 || st.Gid != 998 {
		t.Errorf("mode %v owner %d:%d", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	if err := writeFile(path, []byte("w"), 0o400, 0, 0); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("overwrite: %v", err)
	}
	link := filepath.Join(dir, "link")
	must(t, os.Symlink(filepath.Join(dir, "target"), link))
	if err := writeFile(link, []byte("w"), 0o400, 0, 0); err == nil {
		t.Error("written through a symlink")
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); !os.IsNotExist(err) {
		t.Error("the link's target was created")
	}
}

func TestUserOfAndStartOrder(t *testing.T) {
	for in, want := range map[string][2]int{"999:998": {999, 998}, "999": {999, 999}, "": {0, 0}, "postgres": {0, 0}} {
		if u, g := userOf(in); u != want[0] || g != want[1] {
			t.Errorf("userOf(%q) = %d:%d", in, u, g)
		}
	}
	svcs := []admission.PlanService{{Name: "a", DependsOn: []string{"c"}}, {Name: "b"}, {Name: "c", DependsOn: []string{"b"}}}
	var got []string
	for _, s := range startOrder(svcs) {
		got = append(got, s.Name)
	}
	if !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("start order %v", got)
	}
	for _, bad := range []string{"", "-a", "A", "a_b", "abcdefghijabcdefghijabcdefghijabc"} {
		if ValidName(bad) == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if ValidName("ws-1") != nil {
		t.Error("ws-1 refused")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
