package api

import _ "embed"

// openAPI is the submit socket's API as an OpenAPI 3.1 document.
//
//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the submit socket's HTTP API as an OpenAPI 3.1 document
// (YAML), for generating clients in other languages or checking traffic.
// Its component schemas that the repository publishes elsewhere (the
// phase request, the receipt, the policy, the CLI's JSON shapes) are
// referenced by their $id.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// controlOpenAPI is the control socket's API, beside openAPI, whose
// shared shapes it references by relative path (openapi.yaml#/...).
//
//go:embed openapi-control.yaml
var controlOpenAPI []byte

// ControlOpenAPI returns the control socket's HTTP API as an OpenAPI 3.1
// document (YAML). The shapes it shares with the submit socket's
// document it references there, as openapi.yaml#/components/...: keep
// the two side by side under those names.
func ControlOpenAPI() []byte { return append([]byte(nil), controlOpenAPI...) }
