package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// CAPath is where the sandbox finds the run's interception CA (public
// certificate only), bound read-only by the backend (its
// backend.EgressCAPath); CAEnv's variables point at it.
const CAPath = "/etc/custody/egress-ca.pem"

// CAEnv are the variables that make common TLS stacks trust the run's
// interception CA: OpenSSL and Go (SSL_CERT_FILE), curl (CURL_CA_BUNDLE),
// Python requests (REQUESTS_CA_BUNDLE) and Node (NODE_EXTRA_CA_CERTS).
var CAEnv = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}

// ErrNotIntercepted: a leaf was asked for a host the run's CA does not
// cover.
var ErrNotIntercepted = errors.New("host is not intercepted")

// RunCA is one run's interception CA: an ECDSA P-256 CA, valid briefly and
// name-constrained to the run's intercepted hosts exactly, with one leaf per
// host issued at creation. Its private key lives only in this value (never
// exported, marshalled or written anywhere); the sandbox gets CertPEM.
type RunCA struct {
	cert   *x509.Certificate
	certPE []byte
	leaves map[string]*tls.Certificate
}

// NewRunCA makes a CA for hosts, valid from a minute ago for validity, and
// issues each host's leaf. The CA's key is dropped once the leaves are
// signed: nothing can issue for another name afterwards.
func NewRunCA(hosts []string, validity time.Duration) (*RunCA, error) {
	if len(hosts) == 0 {
		return nil, errors.New("egress: an interception CA needs at least one host")
	}
	if validity <= 0 || validity > 48*time.Hour {
		return nil, fmt.Errorf("egress: interception CA validity %s is not in (0, 48h]", validity)
	}
	hosts = slices.Compact(slices.Sorted(slices.Values(hosts)))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: interception CA key: %w", err)
	}
	now := time.Now()
	notBefore, notAfter := now.Add(-time.Minute), now.Add(validity)
	tmpl := caTemplate(hosts, notBefore, notAfter)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: interception CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: interception CA: %w", err)
	}
	r := &RunCA{cert: ca, certPE: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}
	for _, h := range hosts {
		lk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("egress: leaf key for %s: %w", h, err)
		}
		lt := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: h}, DNSNames: []string{h},
			NotBefore: notBefore, NotAfter: notAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		ld, err := x509.CreateCertificate(rand.Reader, lt, ca, &lk.PublicKey, key)
		if err != nil {
			return nil, fmt.Errorf("egress: leaf for %s: %w", h, err)
		}
		leaf, err := x509.ParseCertificate(ld)
		if err != nil {
			return nil, fmt.Errorf("egress: leaf for %s: %w", h, err)
		}
		r.leaves[h] = &tls.Certificate{Certificate: [][]byte{ld}, PrivateKey: lk, Leaf: leaf}
	}
	return r, nil
}

// caTemplate is the interception CA: a CA for leaves only (path length
// zero), constrained to hosts exactly. A DNS name constraint "h" permits h
// and every name under it; excluding ".h" (subdomains only) leaves h.
func caTemplate(hosts []string, notBefore, notAfter time.Time) *x509.Certificate {
	var excluded []string
	for _, h := range hosts {
		excluded = append(excluded, "."+h)
	}
	return &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "custody per-run egress interception CA"},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage:                    x509.KeyUsageCertSign,
		PermittedDNSDomainsCritical: true, PermittedDNSDomains: hosts, ExcludedDNSDomains: excluded,
	}
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("egress: serial number: %v", err)) // crypto/rand never fails on Linux
	}
	return n
}

// CertPEM is the CA certificate (public), the bundle the sandbox trusts.
func (r *RunCA) CertPEM() []byte { return slices.Clone(r.certPE) }

// Certificate is the parsed CA certificate.
func (r *RunCA) Certificate() *x509.Certificate { return r.cert }

// Leaf returns the certificate the proxy presents for host, issued at
// creation; any other host is ErrNotIntercepted.
func (r *RunCA) Leaf(host string) (*tls.Certificate, error) {
	l, ok := r.leaves[host]
	if !ok {
		return nil, fmt.Errorf("egress: no leaf for %q: %w", host, ErrNotIntercepted)
	}
	return l, nil
}

// String names the CA without any key material.
func (r *RunCA) String() string {
	return fmt.Sprintf("interception CA serial %x for %v until %s", r.cert.SerialNumber, r.cert.PermittedDNSDomains, r.cert.NotAfter.Format(time.RFC3339))
}

// GoString is String, so %#v prints no key either.
func (r *RunCA) GoString() string { return r.String() }

// MarshalJSON is the certificate alone.
func (r *RunCA) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, "%q", r.certPE), nil
}
