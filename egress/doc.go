// Package egress is custody's restricted egress: a per-run proxy that runs
// in custodyd, outside the sandbox, and a credential broker (gateway and
// interception forms).
//
// The sandbox's network namespace holds only loopback. custodyd opens the
// proxy's and the gateways' listening sockets inside that namespace
// (ListenIn) and serves them from its own, so the workload can reach those
// sockets and nothing else: direct IPs, UDP, ICMP, IPv6 and DNS have no
// route out.
//
// The proxy speaks HTTP CONNECT and plain HTTP. A destination is allowed
// only if its host:port is in the run's allowlist, matched exactly on the
// CONNECT target, on the Host header and on the TLS SNI of the tunnelled
// ClientHello; a mismatch is refused. The proxy resolves names itself and
// refuses a name any of whose addresses is private, loopback, link-local,
// CGNAT, multicast, unspecified, a metadata address or an IPv6 form that
// embeds IPv4 (DNS rebinding). Connections, bytes and time are bounded, and
// every decision is recorded (Decisions) for the receipt.
//
// A gateway is a sandbox-local plain-HTTP endpoint for one bound
// credential: it forwards each request to the bound destination over
// verified TLS, adding the credential's header. A credential in the
// interception form has no gateway: a CONNECT to its bound host alone is
// TLS-terminated by the proxy with a leaf of the run's CA (RunCA), whose
// certificate the sandbox trusts and whose key never leaves custodyd, and
// its requests are forwarded the same way. The secret never enters the
// sandbox, and decisions name the credential and its form, never its value.
package egress
