package platform

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/custody-dev/custody/internal/regfile"
)

// ProbeRuntime identifies the OCI runtime binary at path: it runs
// `path --version`, parses the "<name> version X" and "spec: Y" lines runc
// prints, and hashes the file. The file is hashed before and after it runs,
// so the digest is known to belong to the binary that answered.
func ProbeRuntime(ctx context.Context, path string) (*Runtime, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("probe runtime %s: %w", path, err)
	}
	rt := &Runtime{Path: abs}
	if rt.SHA256, err = FileSHA256(abs); err != nil {
		return nil, fmt.Errorf("probe runtime: %w", err)
	}

	cmd := exec.CommandContext(ctx, abs, "--version")
	cmd.Env = []string{} // the answer must not depend on the caller's environment
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("probe runtime: %s --version: %w: %s", abs, err, strings.TrimSpace(stderr.String()))
	}
	if rt.Version, rt.Spec, err = parseRuntimeVersion(out); err != nil {
		return nil, fmt.Errorf("probe runtime: %s --version: %w", abs, err)
	}

	after, err := FileSHA256(abs)
	if err != nil {
		return nil, fmt.Errorf("probe runtime: %w", err)
	}
	if after != rt.SHA256 {
		return nil, fmt.Errorf("probe runtime: %s changed while being probed (sha256 %s, then %s)", abs, rt.SHA256, after)
	}
	return rt, nil
}

// parseRuntimeVersion parses runc-style --version output:
//
//	runc version 1.5.3
//	commit: v1.5.3-0-g...
//	spec: 1.3.0
//	go: go1.26.8
func parseRuntimeVersion(out []byte) (version, spec string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "version" && version == "":
			version = f[2]
		case len(f) >= 2 && f[0] == "spec:":
			spec = f[1]
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	if version == "" {
		return "", "", fmt.Errorf(`no "<name> version X" line in %q`, out)
	}
	if spec == "" {
		return "", "", fmt.Errorf(`no "spec: Y" line in %q`, out)
	}
	return version, spec, nil
}

// maxBinarySize bounds a binary FileSHA256 hashes; runc is about 15 MB.
const maxBinarySize = 1 << 30

// FileSHA256 returns the hex SHA-256 digest of the contents of the regular
// file at path (regfile.Open: a FIFO or device is refused, not read).
func FileSHA256(path string) (string, error) {
	f, err := regfile.Open(path, maxBinarySize)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
