package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"
)

// The CA's name constraints hold for anything its key could sign: a leaf
// for a subdomain of the bound host, for another host, or for the bound
// host beside another name, does not verify; the bound host's does.
func TestCANameConstraints(t *testing.T) {
	host := "api.provider.example"
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := caTemplate([]string{host}, now.Add(-time.Minute), now.Add(time.Hour))
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(names ...string) *x509.Certificate {
		lk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		lt := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		ld, err := x509.CreateCertificate(rand.Reader, lt, ca, &lk.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(ld)
		return c
	}
	if _, err := leaf(host).Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
		t.Fatalf("legit: the bound host's leaf does not verify: %v", err)
	}
	for _, names := range [][]string{{"sub." + host}, {"other.example"}, {"provider.example"}, {host, "other.example"}} {
		if _, err := leaf(names...).Verify(x509.VerifyOptions{Roots: pool, DNSName: names[0]}); err == nil {
			t.Errorf("a leaf for %v verifies under the CA constrained to %s", names, host)
		}
	}
	// Path length zero: an intermediate under it is refused.
	ik, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	it := caTemplate([]string{host}, now.Add(-time.Minute), now.Add(time.Hour))
	it.MaxPathLenZero = true
	idr, err := x509.CreateCertificate(rand.Reader, it, ca, &ik.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	inter, _ := x509.ParseCertificate(idr)
	lk, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ld, _ := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: serial(), DNSNames: []string{host},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		inter, &lk.PublicKey, ik)
	l2, _ := x509.ParseCertificate(ld)
	ip := x509.NewCertPool()
	ip.AddCert(inter)
	if _, err := l2.Verify(x509.VerifyOptions{Roots: pool, Intermediates: ip, DNSName: host}); err == nil {
		t.Error("a leaf under an intermediate of the path-length-zero CA verifies")
	}
}

// The CA expires: past NotAfter nothing it issued verifies.
func TestRunCAExpires(t *testing.T) {
	ca, err := NewRunCA([]string{"api.provider.example"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := ca.Leaf("api.provider.example")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	if _, err := l.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.provider.example", CurrentTime: time.Now().Add(2 * time.Minute)}); err == nil {
		t.Error("the leaf verifies after the CA's validity")
	}
}
