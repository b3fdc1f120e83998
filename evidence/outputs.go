package evidence

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// maxNamed bounds how many files of one kind a reason names.
const maxNamed = 16

// checkOutputs compares the retained output in dir with the receipt's
// output record and returns why they differ, or "" if they match. The error
// is for a cancelled ctx only.
//
// Every recorded file must be a regular file under dir with the recorded
// sha256 and size; dir must hold no other regular file; symlinks are never
// followed (a recorded path that is a symlink is not the file). The tree
// digest of dir is then recomputed as snapshot.Take would store it (files
// 0444, or 0555 if executable, directories 0555), so that directories,
// symlinks and execute bits are covered too, and must equal the receipt's.
//
// A receipt of a run with no output tree matches a dir that does not exist
// or is empty.
func checkOutputs(ctx context.Context, dir string, o *OutputRef) (string, error) {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if o.TreeDigest == "" {
			return "", nil
		}
		return fmt.Sprintf("the output directory %s does not exist", dir), nil
	case err != nil:
		return fmt.Sprintf("the output directory: %v", err), nil
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Sprintf("the output directory %s is a symlink; symlinks are never followed", dir), nil
	case !fi.IsDir():
		return fmt.Sprintf("the output directory %s is not a directory", dir), nil
	}

	tree, err := snapshot.Digest(ctx, dir, treehash.Options{})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return "", fmt.Errorf("evidence: verify: %w", cerr)
		}
		return fmt.Sprintf("the output directory cannot be hashed: %v", err), nil
	}

	if o.TreeDigest == "" {
		if len(tree.Entries) == 0 {
			return "", nil
		}
		return fmt.Sprintf("the receipt records no output, but %s holds %d entries (first: %q)", dir, len(tree.Entries), tree.Entries[0].Path), nil
	}

	present := make(map[string]*treehash.Entry, len(tree.Entries))
	for i := range tree.Entries {
		present[tree.Entries[i].Path] = &tree.Entries[i]
	}
	var missing, notRegular, changed, extra []string
	recorded := make(map[string]bool, len(o.Files))
	for _, f := range o.Files {
		recorded[f.Path] = true
		e, ok := present[f.Path]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%q", f.Path))
		case e.Kind != treehash.KindFile:
			notRegular = append(notRegular, fmt.Sprintf("%q (a %s)", f.Path, e.Kind))
		case e.SHA256 != f.SHA256 || e.Size != f.Size:
			changed = append(changed, fmt.Sprintf("%q (sha256 %s, %d bytes; the receipt records sha256 %s, %d bytes)", f.Path, e.SHA256, e.Size, f.SHA256, f.Size))
		}
	}
	for _, e := range tree.Entries {
		if e.Kind == treehash.KindFile && !recorded[e.Path] {
			extra = append(extra, fmt.Sprintf("%q", e.Path))
		}
	}

	var bad []string
	name := func(what string, list []string) {
		if len(list) == 0 {
			return
		}
		s := what + ": " + strings.Join(list[:min(len(list), maxNamed)], ", ")
		if len(list) > maxNamed {
			s += fmt.Sprintf(" and %d more", len(list)-maxNamed)
		}
		bad = append(bad, s)
	}
	name("missing file", missing)
	name("not a regular file", notRegular)
	name("changed file", changed)
	name("extra file", extra)
	if tree.Digest != o.TreeDigest {
		s := fmt.Sprintf("tree digest %s is not the receipt's %s", tree.Digest, o.TreeDigest)
		if len(bad) == 0 {
			s += " (every file matches, so a directory, symlink or execute bit differs; " + structural(dir, tree.Entries) + ")"
		}
		bad = append(bad, s)
	}
	return strings.Join(bad, "; "), nil
}

// structural names what the receipt's file list does not cover, the
// directories, symlinks and executable files in dir, so a reviewer knows
// which paths to compare: the receipt records only their tree digest.
func structural(dir string, entries []treehash.Entry) string {
	var paths []string
	for _, e := range entries {
		switch {
		case e.Kind == treehash.KindDir:
			paths = append(paths, fmt.Sprintf("directory %q", e.Path))
		case e.Kind == treehash.KindSymlink:
			paths = append(paths, fmt.Sprintf("symlink %q -> %q", e.Path, e.Target))
		case e.Mode&0o111 != 0:
			paths = append(paths, fmt.Sprintf("executable %q", e.Path))
		}
	}
	if len(paths) == 0 {
		return fmt.Sprintf("%s holds only plain files, so a directory, symlink or execute bit of the run's output is missing here", dir)
	}
	s := "the receipt records these only within the tree digest, so one of them differs or one is missing: " + strings.Join(paths[:min(len(paths), maxNamed)], ", ")
	if len(paths) > maxNamed {
		s += fmt.Sprintf(" and %d more", len(paths)-maxNamed)
	}
	return s
}

// ErrOutputsMissing reports recorded output files that are not in a
// directory said to hold them.
var ErrOutputsMissing = errors.New("output files missing")

// MissingOutputs checks that each of paths (slash-separated, relative, as
// a run's output record lists its files) is a regular file under dir,
// reached without following a symlink, and returns an error wrapping
// ErrOutputsMissing that names the first maxNamed that are not (and how
// many in all), or nil. It checks presence only; custody verify checks
// the bytes.
func MissingOutputs(dir string, paths []string) error {
	var missing []string
	for _, p := range paths {
		if !regularUnder(dir, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	named := missing[:min(len(missing), maxNamed)]
	quoted := make([]string, len(named))
	for i, m := range named {
		quoted[i] = fmt.Sprintf("%q", m)
	}
	more := ""
	if len(missing) > len(named) {
		more = fmt.Sprintf(" and %d more", len(missing)-len(named))
	}
	return fmt.Errorf("%w: %d of the %d recorded files are missing: %s%s", ErrOutputsMissing, len(missing), len(paths), strings.Join(quoted, ", "), more)
}

// regularUnder says whether rel names a regular file under dir, no
// component of it a symlink.
func regularUnder(dir, rel string) bool {
	parts := strings.Split(rel, "/")
	p := dir
	for i, part := range parts {
		if part == "" || part == "." || part == ".." {
			return false
		}
		p += string(os.PathSeparator) + part
		fi, err := os.Lstat(p)
		if err != nil {
			return false
		}
		if i < len(parts)-1 && !fi.IsDir() || i == len(parts)-1 && !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}
