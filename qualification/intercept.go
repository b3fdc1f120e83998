package qualification

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/egress"
)

// The interception-form checks' upstream: a TLS server at the allowed
// address, with a certificate from a CA of the qualification's own, for
// the provider name (bound to the credential) and the allowed name (the
// blind tunnel).
const (
	egressProvider   = "provider.qualify.custody.test"
	egressCredential = "qualify-provider"
	interceptExpect  = "custody qualify provider authorized"
)

// interceptWorld is the TLS upstream, its CA file for custodyd and the
// secret the provider expects.
type interceptWorld struct {
	caFile, secretFile, secret string
	srv                        *http.Server
}

// startIntercept writes the CA and the secret under dir and serves TLS on
// port 443 at the allowed address in the upstream namespace far.
func startIntercept(dir, far string) (*interceptWorld, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	iw := &interceptWorld{caFile: filepath.Join(dir, "upstream-ca.pem"), secretFile: filepath.Join(dir, "provider-token"),
		secret: hex.EncodeToString(b)}
	if err := os.WriteFile(iw.secretFile, []byte(iw.secret+"\n"), 0o600); err != nil {
		return nil, err
	}
	caDER, cert, err := egress.UpstreamCertificate("custody qualify upstream CA", time.Hour, egressProvider, egressAllowed)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(iw.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return nil, err
	}
	ln, err := egress.ListenIn(far, egressAllowedAddr+":443")
	if err != nil {
		return nil, err
	}
	iw.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.TLS.ServerName != egressProvider {
			fmt.Fprintf(rw, "custody qualify upstream %s\n", r.TLS.ServerName)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+iw.secret {
			http.Error(rw, "no credential", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(rw, interceptExpect)
	})}
	go iw.srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}))
	return iw, nil
}

// policy binds the credential to the generate stage in the interception
// form and grants that stage the allowed host over TLS (the blind tunnel).
func (iw *interceptWorld) policy() string {
	return fmt.Sprintf("    generate: [%q]\ncredentials:\n  %s: {file: %q, destination: %q, header: Authorization, format: \"Bearer {}\", stages: [generate], form: intercept, requests: [\"GET /\"]}\n",
		egressAllowed+":443", egressCredential, iw.secretFile, egressProvider+":443")
}

func (iw *interceptWorld) target() *conformance.InterceptTarget {
	return &conformance.InterceptTarget{Credential: egressCredential, Stage: "generate", Bound: egressProvider + ":443",
		Expect: interceptExpect, Other: egressAllowed + ":443"}
}
