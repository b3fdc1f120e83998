package keys_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"github.com/custody-dev/custody/internal/testenv"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/custody-dev/custody/keys"
)

// Compile-time checks that the key types plug into DSSE.
var (
	_ dsse.SignerVerifier = (*keys.Signer)(nil)
	_ dsse.Verifier       = (*keys.Verifier)(nil)
)

func keyDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keys")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func TestLoadOrCreateRoundTrip(t *testing.T) {
	dir := keyDir(t)
	s1, created, err := keys.LoadOrCreate(dir, "issuer")
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("first LoadOrCreate did not report created")
	}
	if m := mode(t, filepath.Join(dir, "issuer.key")); m != 0o600 {
		t.Errorf("key file mode %v, want 0600", m)
	}
	if m := mode(t, filepath.Join(dir, "issuer.pub")); m != 0o644 {
		t.Errorf("public key file mode %v, want 0644", m)
	}

	s2, created, err := keys.LoadOrCreate(dir, "issuer")
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Error("second LoadOrCreate reported created")
	}
	id1, _ := s1.KeyID()
	id2, _ := s2.KeyID()
	if id1 != id2 {
		t.Fatalf("reloaded key has KeyID %s, want %s", id2, id1)
	}

	v, err := keys.LoadPublic(filepath.Join(dir, "issuer.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if v.ID() != id1 {
		t.Fatalf("public key file has KeyID %s, want %s", v.ID(), id1)
	}
	sig, err := s2.Sign(context.Background(), []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(context.Background(), []byte("hello"), sig); err != nil {
		t.Fatalf("signature by reloaded key does not verify under the .pub: %v", err)
	}

	// No temporary files are left behind.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Errorf("key directory holds %d entries, want 2", len(ents))
	}
}

func TestLoadOrCreateRestrictiveUmask(t *testing.T) {
	dir := keyDir(t)
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	if _, _, err := keys.LoadOrCreate(dir, "k"); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, filepath.Join(dir, "k.key")); m != 0o600 {
		t.Errorf("key file mode %v, want 0600", m)
	}
	if m := mode(t, filepath.Join(dir, "k.pub")); m != 0o644 {
		t.Errorf("public key file mode %v, want 0644", m)
	}
}

func TestPublicKeyFile(t *testing.T) {
	dir := keyDir(t)
	s, _, err := keys.LoadOrCreate(dir, "k")
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "k.pub")

	// A missing .pub is rewritten.
	if err := os.Remove(pub); err != nil {
		t.Fatal(err)
	}
	if _, created, err := keys.LoadOrCreate(dir, "k"); err != nil || created {
		t.Fatalf("created=%v err=%v", created, err)
	}
	if v, err := keys.LoadPublic(pub); err != nil || v.ID() != s.ID() {
		t.Fatalf("rewritten .pub: %v", err)
	}

	// A .pub of another key is refused, not overwritten.
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, other.PublicPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(dir, "k"); !errors.Is(err, keys.ErrKeyMismatch) {
		t.Fatalf("err = %v, want ErrKeyMismatch", err)
	}
	if v, err := keys.LoadPublic(pub); err != nil || v.ID() != other.ID() {
		t.Fatal("mismatched .pub was overwritten")
	}

	// A stale .pub next to a new key is replaced.
	if err := os.Remove(filepath.Join(dir, "k.key")); err != nil {
		t.Fatal(err)
	}
	s2, created, err := keys.LoadOrCreate(dir, "k")
	if err != nil || !created {
		t.Fatalf("created=%v err=%v", created, err)
	}
	if v, err := keys.LoadPublic(pub); err != nil || v.ID() != s2.ID() {
		t.Fatalf("stale .pub not replaced: %v", err)
	}
}

func TestKeyIDFormat(t *testing.T) {
	s, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pub := s.Public().(*ecdsa.PublicKey)
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := keys.KeyID(pub); got != want {
		t.Fatalf("KeyID = %s, want %s", got, want)
	}
	if id, _ := s.KeyID(); id != want || s.ID() != want || s.Verifier().ID() != want {
		t.Fatalf("Signer.KeyID = %s, Signer.ID = %s, Verifier.ID = %s, want %s", id, s.ID(), s.Verifier().ID(), want)
	}
	if keys.KeyID(nil) != "" {
		t.Fatal("KeyID(nil) is not empty")
	}
	v, err := keys.ParsePublic(s.PublicPEM())
	if err != nil {
		t.Fatal(err)
	}
	if v.ID() != want {
		t.Fatalf("parsed PublicPEM has KeyID %s, want %s", v.ID(), want)
	}
}

func TestInsecureKeyFileRefused(t *testing.T) {
	dir := keyDir(t)
	if _, _, err := keys.LoadOrCreate(dir, "k"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []fs.FileMode{0o644, 0o640, 0o604, 0o660} {
		if err := os.Chmod(filepath.Join(dir, "k.key"), m); err != nil {
			t.Fatal(err)
		}
		_, _, err := keys.LoadOrCreate(dir, "k")
		if !errors.Is(err, keys.ErrInsecureFile) {
			t.Errorf("mode %v: err = %v, want ErrInsecureFile", m, err)
		}
	}
	// Read-only for the owner is fine.
	if err := os.Chmod(filepath.Join(dir, "k.key"), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(dir, "k"); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
}

func TestSymlinkedKeyFileRefused(t *testing.T) {
	dir := keyDir(t)
	other := keyDir(t)
	if _, _, err := keys.LoadOrCreate(other, "k"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(other, "k.key"), filepath.Join(dir, "k.key")); err != nil {
		t.Fatal(err)
	}
	_, _, err := keys.LoadOrCreate(dir, "k")
	if !errors.Is(err, keys.ErrInsecureFile) {
		t.Fatalf("err = %v, want ErrInsecureFile", err)
	}
	// A dangling symlink is not followed to create a file either.
	dir2 := keyDir(t)
	target := filepath.Join(other, "new.key")
	if err := os.Symlink(target, filepath.Join(dir2, "k.key")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(dir2, "k"); !errors.Is(err, keys.ErrInsecureFile) {
		t.Fatalf("dangling symlink: err = %v, want ErrInsecureFile", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadOrCreate created a file through a symlink: %v", err)
	}
}

func TestNonRegularKeyFileRefused(t *testing.T) {
	dir := keyDir(t)
	if err := os.Mkdir(filepath.Join(dir, "k.key"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(dir, "k"); !errors.Is(err, keys.ErrInsecureFile) {
		t.Fatalf("directory: err = %v, want ErrInsecureFile", err)
	}
	dir2 := keyDir(t)
	if err := syscall.Mkfifo(filepath.Join(dir2, "k.key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(dir2, "k"); !errors.Is(err, keys.ErrInsecureFile) {
		t.Fatalf("fifo: err = %v, want ErrInsecureFile", err)
	}
}

func TestKeyFileOwnedByOtherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to chown a key file to another user)")
	}
	dir := keyDir(t)
	if _, _, err := keys.LoadOrCreate(dir, "k"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dir, "k.key"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(dir, "k"); !errors.Is(err, keys.ErrInsecureFile) {
		t.Fatalf("err = %v, want ErrInsecureFile", err)
	}
}

func TestInsecureDirRefused(t *testing.T) {
	base := t.TempDir()

	writable := filepath.Join(base, "writable")
	if err := os.Mkdir(writable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(writable, "k"); !errors.Is(err, keys.ErrInsecureDir) {
		t.Errorf("world-writable dir: err = %v, want ErrInsecureDir", err)
	}

	real := keyDir(t)
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := keys.LoadOrCreate(link, "k"); !errors.Is(err, keys.ErrInsecureDir) {
		t.Errorf("symlinked dir: err = %v, want ErrInsecureDir", err)
	}

	if _, _, err := keys.LoadOrCreate(filepath.Join(base, "missing"), "k"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: err = %v, want ErrNotExist", err)
	}
	for _, name := range []string{"", "..", ".k", "a/b", "a\x00b"} {
		if _, _, err := keys.LoadOrCreate(real, name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
}

func writeKeyFile(t *testing.T, path string, k any) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestNonP256Refused(t *testing.T) {
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]any{"P-384": p384, "Ed25519": edPriv} {
		dir := keyDir(t)
		writeKeyFile(t, filepath.Join(dir, "k.key"), k)
		_, _, err := keys.LoadOrCreate(dir, "k")
		if !errors.Is(err, keys.ErrUnsupportedKey) {
			t.Errorf("%s private key: err = %v, want ErrUnsupportedKey", name, err)
		} else if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "P-256") {
			t.Errorf("%s private key: error %q does not name the key type and P-256", name, err)
		}

		pubDER, err := x509.MarshalPKIXPublicKey(k.(interface{ Public() crypto.PublicKey }).Public())
		if err != nil {
			t.Fatal(err)
		}
		pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
		if _, err := keys.ParsePublic(pubPEM); !errors.Is(err, keys.ErrUnsupportedKey) {
			t.Errorf("%s public key: err = %v, want ErrUnsupportedKey", name, err)
		}
	}
	if _, err := keys.NewVerifier(&p384.PublicKey); !errors.Is(err, keys.ErrUnsupportedKey) {
		t.Errorf("NewVerifier(P-384): err = %v, want ErrUnsupportedKey", err)
	}
}

func TestParsePublicStrict(t *testing.T) {
	s, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	good := s.PublicPEM()
	if _, err := keys.ParsePublic(append([]byte("\n"), append(good, '\n')...)); err != nil {
		t.Errorf("surrounding whitespace refused: %v", err)
	}
	bad := map[string][]byte{
		"empty":        nil,
		"garbage":      []byte("not a key"),
		"two blocks":   append(append([]byte{}, good...), good...),
		"private type": []byte(strings.Replace(string(good), "PUBLIC KEY", "PRIVATE KEY", 2)),
		"trailing":     append(append([]byte{}, good...), "junk"...),
	}
	for name, data := range bad {
		if _, err := keys.ParsePublic(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSignatureDoesNotVerifyUnderAnotherKey(t *testing.T) {
	ctx := context.Background()
	a, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("DSSEv1 28 application/vnd.in-toto+json 2 {}")
	sig, err := a.Sign(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Verifier().Verify(ctx, msg, sig); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	if err := b.Verify(ctx, msg, sig); !errors.Is(err, keys.ErrBadSignature) {
		t.Fatalf("other key: err = %v, want ErrBadSignature", err)
	}
	if err := a.Verify(ctx, append(msg, '!'), sig); !errors.Is(err, keys.ErrBadSignature) {
		t.Fatalf("other message: err = %v, want ErrBadSignature", err)
	}
	ida, _ := a.KeyID()
	idb, _ := b.KeyID()
	if ida == idb {
		t.Fatal("two generated keys share a KeyID")
	}
}

func TestSignHonoursContext(t *testing.T) {
	s, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Sign(ctx, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestDSSERoundTrip(t *testing.T) {
	ctx := context.Background()
	s, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		t.Fatal(err)
	}
	env, err := es.SignPayload(ctx, "text/plain", []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := s.KeyID(); env.Signatures[0].KeyID != id {
		t.Fatalf("envelope keyid %q, want %q", env.Signatures[0].KeyID, id)
	}
	ev, err := dsse.NewEnvelopeVerifier(s.Verifier())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ev.Verify(ctx, env); err != nil {
		t.Fatal(err)
	}
}

// TestLoadPrivate: an existing key loads and nothing is written (no public
// key file appears); a missing one wraps fs.ErrNotExist and is not made;
// an exposed one is refused.
func TestLoadPrivate(t *testing.T) {
	dir := t.TempDir()
	s, _, err := keys.LoadOrCreate(dir, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "k.pub")); err != nil {
		t.Fatal(err)
	}
	got, err := keys.LoadPrivate(dir, "k")
	if err != nil || got.ID() != s.ID() {
		t.Fatalf("load: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "k.pub")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadPrivate wrote the public key: %v", err)
	}
	if _, err := keys.LoadPrivate(dir, "none"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadPrivate made a key: %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, "k.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.LoadPrivate(dir, "k"); !errors.Is(err, keys.ErrInsecureFile) {
		t.Fatalf("exposed key: %v", err)
	}
}

// TestCreatePrivate: CreatePrivate makes the private key alone (0600, no
// public key file), which LoadOrCreate then loads, writing its public key;
// an existing key is refused, unchanged.
func TestCreatePrivate(t *testing.T) {
	dir := t.TempDir()
	s, err := keys.CreatePrivate(dir, "next")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "next.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("next.key: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "next.pub")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("CreatePrivate wrote a public key file: %v", err)
	}
	if _, err := keys.CreatePrivate(dir, "next"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreatePrivate over an existing key: %v", err)
	}
	got, created, err := keys.LoadOrCreate(dir, "next")
	if err != nil || created || got.ID() != s.ID() {
		t.Fatalf("LoadOrCreate after CreatePrivate: %v created=%v", err, created)
	}
	if _, err := keys.LoadPublic(filepath.Join(dir, "next.pub")); err != nil {
		t.Fatal(err)
	}
}
