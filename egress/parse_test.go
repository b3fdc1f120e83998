package egress

import (
	"bufio"
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/internal/testenv"
)

func TestParseDestination(t *testing.T) {
	for _, ok := range []string{"api.provider.example:443", "a.b:1", "proxy.golang.org:65535"} {
		if _, err := ParseDestination(ok); err != nil {
			t.Errorf("ParseDestination(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "api.example", "api.example:", "api.example:0", "api.example:65536", "api.example:080",
		"*.example:443", "Api.Example:443", "example:443", "api.example.:443", "10.0.0.1:443", "[::1]:443", "[2001:db8::1]:443",
		"1.2.3.4.5:80", "a..b:1", "-a.b:1", "a.b:1:2", "a b.c:1"} {
		if _, err := ParseDestination(bad); !errors.Is(err, ErrDestination) {
			t.Errorf("ParseDestination(%q): %v, want ErrDestination", bad, err)
		}
	}
}

func TestDenyReason(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "169.254.1.1",
		"100.64.0.1", "0.0.0.0", "0.1.2.3", "224.0.0.1", "255.255.255.255", "240.0.0.1", "198.18.0.1", "::", "::1",
		"fe80::1", "fd00:ec2::254", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1",
		"64:ff9b::a00:1", "2002:a00:1::", "2001:0:a00:1::", "fec0::1", "feff::1"} {
		if DenyReason(netip.MustParseAddr(a)) == "" {
			t.Errorf("DenyReason(%s) allows it", a)
		}
	}
	for _, a := range []string{"203.0.113.10", "198.51.100.1", "8.8.8.8", "2001:db8::1", "2606:4700::1"} {
		if why := DenyReason(netip.MustParseAddr(a)); why != "" {
			t.Errorf("DenyReason(%s) = %q, want allowed", a, why)
		}
	}
}

func TestReadSecretRefusals(t *testing.T) {
	testenv.Root(t) // the secret files must be root's
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	if v, err := ReadSecret(good); err != nil || string(v) != "s3cret\n" {
		t.Fatalf("ReadSecret(good): %q, %v", v, err)
	}
	wide := filepath.Join(dir, "wide")
	os.WriteFile(wide, []byte("x"), 0o644)
	os.Chmod(wide, 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("x"), 0o600)
	os.Chown(other, 1000, 1000)
	// The phases' credentials share the packs' opener: a directory on the
	// way that is a link is refused too.
	dirLink := filepath.Join(t.TempDir(), "creds")
	os.Symlink(dir, dirLink)
	for _, p := range []string{wide, link, other, dir, filepath.Join(dir, "absent"), filepath.Join(dirLink, "good")} {
		if _, err := ReadSecret(p); !errors.Is(err, ErrSecretFile) {
			t.Errorf("ReadSecret(%s): %v, want ErrSecretFile", p, err)
		}
	}
	if _, err := ReadSecret(filepath.Join(dirLink, "good")); !errors.Is(err, regfile.ErrLinkInPath) {
		t.Errorf("ReadSecret through a linked directory: %v, want a link in the path", err)
	}
}

func FuzzParseDestination(f *testing.F) {
	for _, s := range []string{"api.provider.example:443", "[::1]:80", "10.0.0.1:1", "*.x.y:1", "a.b:65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDestination(s)
		if err != nil {
			return
		}
		if d.String() != s {
			t.Fatalf("%q parsed to %q", s, d)
		}
		if _, err := netip.ParseAddr(d.Host); err == nil || strings.ContainsAny(d.Host, "*[]:") {
			t.Fatalf("%q: host %q is not a plain name", s, d.Host)
		}
	})
}

func FuzzReadHead(f *testing.F) {
	f.Add([]byte("GET http://a.b/ HTTP/1.1\r\nHost: a.b\r\n\r\n"))
	f.Add([]byte("CONNECT a.b:443 HTTP/1.1\r\nHost: a.b:443\r\nHost: c.d\r\n\r\n"))
	f.Add([]byte("\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		head, _, err := readHead(bufio.NewReader(bytes.NewReader(data)))
		if err == nil && !bytes.HasPrefix(data, head) {
			t.Fatal("head is not a prefix of the input")
		}
		if len(head) > maxHead {
			t.Fatal("head over bound")
		}
	})
}

func FuzzReadClientHello(f *testing.F) {
	// testdata/fuzz holds a real ClientHello as a seed.
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		sni, seen, err := readClientHello(bytes.NewReader(data))
		if !bytes.HasPrefix(data, seen) || len(seen) > maxHello {
			t.Fatal("replay bytes are not the prefix read")
		}
		if err == nil && sni != "" && !bytes.Contains(data, []byte(sni)) {
			t.Fatalf("SNI %q is not in the input", sni)
		}
	})
}
