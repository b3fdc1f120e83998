// Command client is the egress tests' workload: a static binary run in
// the sandbox that tries one way out and prints "OK <detail>" (exit 0) or
// "REFUSED <error>" (exit 1).
//
//	client get URL               GET through HTTP(S)_PROXY, CAs from SSL_CERT_FILE
//	client sni HOST:PORT NAME    CONNECT to HOST:PORT, then TLS with SNI NAME
//	client cert HOST:PORT        CONNECT, then TLS without verifying: prints the server certificate's issuer
//	client tcp ADDR              a direct TCP connection
//	client udp ADDR              a UDP datagram
//	client dns SERVER NAME       a TXT lookup of NAME at SERVER (UDP and TCP)
//	client front URL HOST        GET URL through HTTP(S)_PROXY with the Host header HOST (domain fronting)
//	client flood N HOST:PORT     N CONNECTs to HOST:PORT, one after another: prints how many the proxy answered 403
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

func main() {
	limit := 5 * time.Second
	if len(os.Args) > 1 && os.Args[1] == "flood" {
		limit = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	detail, err := run(ctx, os.Args[1:])
	if err != nil {
		fmt.Println("REFUSED", err)
		os.Exit(1)
	}
	fmt.Println("OK", detail)
}

func run(ctx context.Context, args []string) (string, error) {
	switch args[0] {
	case "get", "front":
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[1], nil)
		if err != nil {
			return "", err
		}
		if args[0] == "front" {
			req.Host = args[2]
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return string(b), nil
	case "sni", "cert":
		pu, err := url.Parse(os.Getenv("HTTPS_PROXY"))
		if err != nil || pu.Host == "" {
			return "", fmt.Errorf("no HTTPS_PROXY: %v", err)
		}
		conn, err := net.DialTimeout("tcp", pu.Host, 5*time.Second)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", args[1], args[1])
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("CONNECT status %d", resp.StatusCode)
		}
		if args[0] == "cert" {
			host, _, _ := net.SplitHostPort(args[1])
			// Not verified on purpose: the test looks at who issued it.
			tc := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true})
			if err := tc.Handshake(); err != nil {
				return "", err
			}
			return "issuer=" + tc.ConnectionState().PeerCertificates[0].Issuer.CommonName, nil
		}
		tc := tls.Client(conn, &tls.Config{ServerName: args[2]})
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		return "handshake with " + args[2], nil
	case "flood":
		return flood(ctx, args[1], args[2])
	case "tcp", "udp":
		var d net.Dialer
		c, err := d.DialContext(ctx, args[0], args[1])
		if err != nil {
			return "", err
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			return "", err
		}
		return "sent to " + args[1], nil
	case "dns":
		for _, network := range []string{"udp", "tcp"} {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, args[1])
			}}
			if txt, err := r.LookupTXT(ctx, args[2]); err == nil {
				return fmt.Sprintf("TXT over %s: %q", network, txt), nil
			}
		}
		if txt, err := net.DefaultResolver.LookupTXT(ctx, args[2]); err == nil {
			return fmt.Sprintf("TXT from the default resolver: %q", txt), nil
		}
		return "", fmt.Errorf("no TXT answer for %s", args[2])
	}
	return "", fmt.Errorf("unknown mode %q", args[0])
}

// flood sends n CONNECTs to target through HTTPS_PROXY, each on its own
// connection, and counts the 403s.
func flood(ctx context.Context, n, target string) (string, error) {
	pu, err := url.Parse(os.Getenv("HTTPS_PROXY"))
	if err != nil || pu.Host == "" {
		return "", fmt.Errorf("no HTTPS_PROXY: %v", err)
	}
	var count, refused int
	if _, err := fmt.Sscan(n, &count); err != nil {
		return "", err
	}
	var d net.Dialer
	for range count {
		conn, err := d.DialContext(ctx, "tcp", pu.Host)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil && resp.StatusCode == http.StatusForbidden {
			refused++
		}
		conn.Close()
	}
	return fmt.Sprintf("%d of %d refused", refused, count), nil
}
