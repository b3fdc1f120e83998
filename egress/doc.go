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
// embeds IPv4 (DNS rebinding). Connections, bytes and time are bounded.
// Every allowed decision is recorded for the receipt, and a run's proxy
// refuses a connection it could no longer record; refusals are counted
// and sampled (Report.Refusals), so a flood of them hides nothing. An
// allowed tunnel is blind: the Host inside it is not seen. A destination
// the policy has inspected (Config.Inspect) is TLS-terminated with the
// run's CA instead, and a request in it whose Host is not the destination
// (domain fronting) is refused.
//
// A gateway is a sandbox-local plain-HTTP endpoint for one bound
// credential: it forwards each request to the bound destination over
// verified TLS, adding the credential's header only to a request its
// binding names by method and path prefix (Gateway.Requests). A credential in the
// interception form has no gateway: a CONNECT to its bound host alone is
// TLS-terminated by the proxy with a leaf of the run's CA (RunCA), whose
// certificate the sandbox trusts and whose key never leaves custodyd, and
// its requests are forwarded the same way. custody never hands the secret
// to the sandbox, and decisions name the credential and its form, never
// its value; but a bound destination that reflects the secret hands it
// back, which no scrub of its answers (kept, as defence in depth) can
// fully prevent. The method and path binding is the control.
package egress
