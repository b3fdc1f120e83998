package image

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// Remove deletes the stored image with the tree digest and every manifest
// binding to it; its layers and config blob stay until Prune finds them
// unreferenced. The caller (custodyd) refuses first when a live grant
// binds it. It wraps ErrNotFound for an image the store does not hold.
func (s *Store) Remove(ctx context.Context, digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.remove(ctx, digest)
}

func (s *Store) remove(ctx context.Context, digest string) error {
	if _, err := s.Get(digest); err != nil {
		return err
	}
	hex, err := treehash.ParseDigest(digest)
	if err != nil {
		return err
	}
	// Bindings first: a binding without its tree is unreadable anyway.
	if err := s.sweep(bindingsName, func(entry string) (bool, error) {
		var img Image
		_, err := snapshot.ReadRecord(filepath.Join(s.dir, bindingsName), treehash.DigestPrefix+entry, recordName, &img)
		return err == nil && img.Digest == digest, err
	}); err != nil {
		return err
	}
	s.sealIDs.drop(digest)
	if err := discard(s.dir, hex); err != nil {
		return fmt.Errorf("image %s: %w", digest, err)
	}
	s.seen.mu.Lock()
	delete(s.seen.fp, digest)
	s.seen.mu.Unlock()
	return ctx.Err()
}

// Pruned is what Prune removed.
type Pruned struct {
	Images  []string `json:"images"`
	Layers  int      `json:"layers"`
	Configs int      `json:"configs"`
}

// Prune removes every stored image keep does not keep (custodyd keeps
// those a live grant binds), then the layers and config blobs no remaining
// image references.
func (s *Store) Prune(ctx context.Context, keep func(digest string) (bool, error)) (*Pruned, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	imgs, err := s.List()
	if err != nil {
		return nil, err
	}
	out := &Pruned{Images: []string{}}
	layers, configs := map[string]bool{}, map[string]bool{}
	for _, img := range imgs {
		kept, err := keep(img.Digest)
		if err != nil {
			return out, err
		}
		if !kept {
			if err := s.remove(ctx, img.Digest); err != nil {
				return out, err
			}
			out.Images = append(out.Images, img.Digest)
			continue
		}
		for _, l := range img.Layers {
			layers[strings.TrimPrefix(l, treehash.DigestPrefix)] = true
		}
		configs[strings.TrimPrefix(img.ConfigDigest, treehash.DigestPrefix)] = true
	}
	// A binding of a kept tree may name another config (the same tree
	// imported from another manifest): keep that too.
	if err := s.sweep(bindingsName, func(entry string) (bool, error) {
		var img Image
		if _, err := snapshot.ReadRecord(filepath.Join(s.dir, bindingsName), treehash.DigestPrefix+entry, recordName, &img); err != nil {
			return false, err
		}
		configs[strings.TrimPrefix(img.ConfigDigest, treehash.DigestPrefix)] = true
		for _, l := range img.Layers {
			layers[strings.TrimPrefix(l, treehash.DigestPrefix)] = true
		}
		return false, nil
	}); err != nil {
		return out, err
	}
	if err := s.sweep(layersName, func(entry string) (bool, error) {
		if !layers[entry] {
			out.Layers++
			return true, nil
		}
		return false, nil
	}); err != nil {
		return out, err
	}
	err = s.sweep(configsName, func(entry string) (bool, error) {
		if !configs[entry] {
			out.Configs++
			return true, nil
		}
		return false, nil
	})
	return out, err
}

// sweep removes each entry of the store's sub directory name (digest hex
// names; staging directories are left alone) for which drop says so.
func (s *Store) sweep(name string, drop func(entry string) (bool, error)) error {
	dir := filepath.Join(s.dir, name)
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, de := range des {
		if _, err := treehash.ParseDigest(treehash.DigestPrefix + de.Name()); err != nil || !de.IsDir() {
			continue
		}
		ok, err := drop(de.Name())
		if err != nil {
			return fmt.Errorf("%s/%s: %w", name, de.Name(), err)
		}
		if ok {
			if err := discard(dir, de.Name()); err != nil {
				return err
			}
		}
	}
	return nil
}

// discard moves dir/entry out of the store's names at once (a rename to a
// staging name, which readers skip) and then deletes it.
func discard(dir, entry string) error {
	gone, err := os.MkdirTemp(dir, snapshot.StagingPrefix+"removed-*")
	if err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, entry), filepath.Join(gone, entry)); err != nil {
		os.Remove(gone)
		return err
	}
	return os.RemoveAll(gone)
}
