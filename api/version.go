package api

import "strings"

// Version is the version of custodyd's HTTP API this package speaks, as
// MAJOR.MINOR. custodyd announces its own in the VersionHeader of every
// answer, on both sockets, and in Status.APIVersion.
//
// What a client may rely on: within one major version, routes, request
// fields, answer fields, event types and error codes keep their meaning
// and are never removed. A minor version may add routes, optional request
// fields, answer fields, event types and error codes, so a client ignores
// fields and events it does not know and treats an unknown error code as
// a refusal it cannot retry. A change that breaks any of that is a new
// major version, served under a new path prefix (/v2/...).
const Version = "1.0"

// VersionHeader is the answer header that carries the API version.
const VersionHeader = "Custody-Api-Version"

// Compatible says whether a daemon announcing version (its VersionHeader
// or Status.APIVersion) serves what this package relies on: the same
// major version. Its minor version may be older or newer; what it adds,
// this package ignores.
func Compatible(version string) bool {
	major, _, ok := strings.Cut(version, ".")
	mine, _, _ := strings.Cut(Version, ".")
	return ok && major == mine
}
