package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/regfile"
)

// maxCredential bounds a credential file custodyd reads.
const maxCredential = 64 << 10

// readCredentials reads every operator credential the plan delivers, from
// its configured source, before anything is spent: a source that is a
// symlink, not a regular file, not 0600 or not root-owned is refused (P5).
// Values are kept in memory only until written to their files.
func (m *Manager) readCredentials(plan *admission.PackPlan) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, s := range plan.Services {
		for _, sec := range s.Secrets {
			if sec.Credential == "" || out[sec.Credential] != nil {
				continue
			}
			path, ok := m.cfg.Credentials[sec.Credential]
			if !ok {
				return nil, fmt.Errorf("credential %s (service %s): %w: custodyd has no source for it; name its 0600 file in custodyd's configuration", sec.Credential, s.Name, ErrCredential)
			}
			v, err := readSource(path)
			if err != nil {
				return nil, fmt.Errorf("credential %s (service %s): %w: %w; make the source a regular root-owned 0600 file, not a link", sec.Credential, s.Name, ErrCredential, err)
			}
			out[sec.Credential] = v
		}
	}
	return out, nil
}

func readSource(path string) ([]byte, error) {
	return regfile.ReadSecret(path, maxCredential)
}

// writeSecrets writes each service's credential, fixture and config
// files into the workspace's state dir, each created with the plan's mode
// (secrets 0400, configs 0444 by default) from its first byte and owned by
// the service's user, and returns the read-only binds that deliver them.
// Nothing is written that exists already.
func (m *Manager) writeSecrets(rec *record, plan *admission.PackPlan, creds, fixtures map[string][]byte) (map[string][]backend.PackMount, error) {
	out := map[string][]backend.PackMount{}
	for _, s := range plan.Services {
		dir := filepath.Join(m.secretsDir(rec.ID), s.Name)
		secrets, err := writeFiles(dir, s, s.Secrets, creds, fixtures, 0o400)
		if err != nil {
			return nil, err
		}
		// Under "@configs": no secret is named with an @, so a config
		// never lands on a secret's file.
		configs, err := writeFiles(filepath.Join(dir, "@configs"), s, s.Configs, nil, fixtures, 0o444)
		if err != nil {
			return nil, err
		}
		if ms := append(secrets, configs...); len(ms) > 0 {
			out[s.Name] = ms
		}
	}
	return out, nil
}

// writeFiles writes files (credentials by name, content by digest) into
// dir for service s, and returns their binds.
func writeFiles(dir string, s admission.PlanService, files []admission.PlanSecret, creds, fixtures map[string][]byte, defMode uint32) ([]backend.PackMount, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credential dir of %s: %w", s.Name, err)
	}
	var out []backend.PackMount
	uid, gid := userOf(s.User)
	for _, sec := range files {
		v, ok := creds[sec.Credential]
		if sec.Credential == "" {
			v, ok = fixtures[sec.FixtureSHA256]
		}
		if !ok {
			return nil, fmt.Errorf("service %s: %s: neither a credential read nor content matching its digest", s.Name, sec.Name)
		}
		u, g := uid, gid
		if n, err := strconv.Atoi(sec.UID); err == nil {
			u = n
		}
		if n, err := strconv.Atoi(sec.GID); err == nil {
			g = n
		}
		mode := defMode
		if sec.Mode != 0 {
			mode = sec.Mode
		}
		path := filepath.Join(dir, sec.Name)
		if err := writeFile(path, v, mode, u, g); err != nil {
			return nil, fmt.Errorf("service %s: file %s: %w", s.Name, sec.Name, err)
		}
		out = append(out, backend.PackMount{Type: "bind", Source: path, Target: sec.Target, ReadOnly: true})
	}
	return out, nil
}

func writeFile(path string, v []byte, mode uint32, uid, gid int) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	// The umask cannot widen the mode, but fchmod makes it exact.
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	if _, err := f.Write(v); err != nil {
		return err
	}
	return f.Sync()
}

// userOf is the numeric uid and gid of a compose user ("999:999", "999");
// a name or nothing is root's, as the engine runs it without /etc/passwd
// of the image at hand here.
func userOf(user string) (int, int) {
	u, g, _ := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil {
		return 0, 0
	}
	gid, err := strconv.Atoi(g)
	if err != nil {
		gid = uid
	}
	return uid, gid
}
