package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
)

// Dataset is an input tree for the closure digest measurement.
type Dataset struct {
	Name  string
	Files int
	Bytes int64
	// Path is the tree's root once Ensure has made it.
	Path string
}

// dataVersion changes whenever the generated content would: a data set
// made by another version is made again.
const dataVersion = "custody-bench-data v1"

// Label names the data set in the table.
func (d *Dataset) Label() string {
	if d.Name[:5] == "large" {
		return fmt.Sprintf("closure digest %d MiB in %d files", d.Bytes>>20, d.Files)
	}
	return fmt.Sprintf("closure digest %dk small files (%d MiB)", d.Files/1000, d.Bytes>>20)
}

// Datasets are the input trees: a few large files, and many small ones, at
// two sizes each so that growth is visible. Small files are 256 B–4 KiB
// (about 2.1 KiB on average), 100 to a directory.
func Datasets() []Dataset {
	return []Dataset{
		{Name: "large-256MiB", Files: 4, Bytes: 256 << 20},
		{Name: "large-1GiB", Files: 4, Bytes: 1 << 30},
		{Name: "small-10k", Files: 10_000},
		{Name: "small-100k", Files: 100_000},
	}
}

// Ensure makes the data set under dir unless a complete copy of this
// version is there already, and fills in Path, Files and Bytes. The
// completion marker sits beside the tree, not in it.
func (d *Dataset) Ensure(dir string) (made bool, err error) {
	d.Path = filepath.Join(dir, d.Name)
	marker := filepath.Join(dir, "."+d.Name+".complete")
	want := fmt.Sprintf("%s %s files=%d bytes=%d\n", dataVersion, d.Name, d.Files, d.Bytes)
	if b, err := os.ReadFile(marker); err == nil && string(b) == want {
		if d.Bytes == 0 {
			d.Bytes, err = treeBytes(d.Path)
		}
		return false, err
	}
	_ = os.Remove(marker)
	if err := os.RemoveAll(d.Path); err != nil {
		return false, err
	}
	if err := os.MkdirAll(d.Path, 0o755); err != nil {
		return false, err
	}
	if d.Bytes > 0 {
		err = d.makeLarge()
	} else {
		err = d.makeSmall()
	}
	if err != nil {
		return true, fmt.Errorf("make data set %s: %w", d.Name, err)
	}
	if d.Bytes == 0 {
		if d.Bytes, err = treeBytes(d.Path); err != nil {
			return true, err
		}
	}
	return true, os.WriteFile(marker, []byte(want), 0o644)
}

// makeLarge writes Files files of Bytes/Files pseudo-random bytes each.
func (d *Dataset) makeLarge() error {
	each := d.Bytes / int64(d.Files)
	var wg sync.WaitGroup
	errs := make([]error, d.Files)
	for i := range d.Files {
		wg.Go(func() {
			errs[i] = writeRandom(filepath.Join(d.Path, fmt.Sprintf("blob-%02d.bin", i)), each, uint64(i)+uint64(d.Bytes))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func writeRandom(path string, n int64, seed uint64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.CopyN(w, &prng{r: rand.NewPCG(seed, 0x9e3779b97f4a7c15)}, n); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// makeSmall writes Files small files, 100 per directory.
func (d *Dataset) makeSmall() error {
	r := rand.New(rand.NewPCG(uint64(d.Files), 1))
	buf := make([]byte, 4096)
	src := &prng{r: rand.NewPCG(uint64(d.Files), 2)}
	for i := range d.Files {
		if i%100 == 0 {
			if err := os.Mkdir(filepath.Join(d.Path, fmt.Sprintf("d%04d", i/100)), 0o755); err != nil {
				return err
			}
		}
		n := 256 + r.IntN(4096-256+1)
		if _, err := io.ReadFull(src, buf[:n]); err != nil {
			return err
		}
		p := filepath.Join(d.Path, fmt.Sprintf("d%04d", i/100), fmt.Sprintf("f%03d.txt", i%100))
		if err := os.WriteFile(p, buf[:n], 0o644); err != nil {
			return err
		}
	}
	return nil
}

func treeBytes(root string) (int64, error) {
	var n int64
	err := filepath.Walk(root, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

// prng is an io.Reader of pseudo-random bytes.
type prng struct{ r *rand.PCG }

func (p *prng) Read(b []byte) (int, error) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := p.r.Uint64()
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	if i < len(b) {
		v := p.r.Uint64()
		for ; i < len(b); i++ {
			b[i] = byte(v)
			v >>= 8
		}
	}
	return len(b), nil
}
