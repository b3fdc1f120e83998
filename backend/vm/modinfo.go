package vm

import (
	"bytes"
	"debug/elf"
	"fmt"
	"path"
	"strings"
)

// moduleDeps is, for each module of paths (Modules; by file name), the
// modules of that list it must follow: its .modinfo depends (symbols it links
// against) and its softdep pre (libcrc32c asks the crypto API for crc32c
// at load). The init loads each module as soon as these are in, the
// others at the same time: a driver's probe waits on QEMU, and another
// module loads meanwhile. A depends the list lacks is a config error: that
// module could never load.
func moduleDeps(paths []string, mods [][]byte) (map[string][]string, error) {
	type info struct {
		file             string
		depends, softpre []string
	}
	infos := make([]info, len(paths))
	byName := map[string]string{} // module name or alias -> file name
	for i, mod := range paths {
		file := path.Base(mod)
		kv, err := modinfo(mods[i])
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", file, err)
		}
		infos[i].file = file
		byName[modName(strings.TrimSuffix(file, ".ko"))] = file
		for _, e := range kv {
			k, v, _ := strings.Cut(e, "=")
			switch k {
			case "name", "alias":
				byName[modName(v)] = file
			case "depends":
				for d := range strings.SplitSeq(v, ",") {
					if d != "" {
						infos[i].depends = append(infos[i].depends, d)
					}
				}
			case "softdep":
				// "pre: a b post: c"
				pre := false
				for _, f := range strings.Fields(v) {
					switch f {
					case "pre:":
						pre = true
					case "post:":
						pre = false
					default:
						if pre {
							infos[i].softpre = append(infos[i].softpre, f)
						}
					}
				}
			}
		}
	}
	// paths are in load order, so a module follows only those before it:
	// that keeps the guest's wait free of cycles.
	pos := map[string]int{}
	for i, in := range infos {
		pos[in.file] = i
	}
	deps := map[string][]string{}
	for i, in := range infos {
		for _, d := range in.depends {
			f, ok := byName[modName(d)]
			if !ok {
				return nil, fmt.Errorf("module %s depends on %s, which is not among the modules the init loads", in.file, d)
			}
			if pos[f] >= i {
				return nil, fmt.Errorf("module %s depends on %s, which comes after it in the load order", in.file, d)
			}
			deps[in.file] = append(deps[in.file], f)
		}
		// A soft dependency outside the list is the kernel's or absent.
		for _, d := range in.softpre {
			if f, ok := byName[modName(d)]; ok && pos[f] < i {
				deps[in.file] = append(deps[in.file], f)
			}
		}
	}
	return deps, nil
}

// modName is a module name as the kernel compares them: '-' and '_' are
// one.
func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// modinfo is the key=value entries of a module's .modinfo section.
func modinfo(mod []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(mod))
	if err != nil {
		return nil, fmt.Errorf("not an ELF module: %w", err)
	}
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("no .modinfo section")
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf(".modinfo: %w", err)
	}
	var out []string
	for e := range bytes.SplitSeq(data, []byte{0}) {
		if len(e) > 0 {
			out = append(out, string(e))
		}
	}
	return out, nil
}
