package daemon

import "net/http"

// router is what a socket's route registration needs of its mux, so the
// same registration both serves the socket and lists its routes.
type router interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// patterns is a router that records the patterns registered on it.
type patterns []string

func (p *patterns) HandleFunc(pattern string, _ func(http.ResponseWriter, *http.Request)) {
	*p = append(*p, pattern)
}

// SubmitRoutes lists the routes the submit socket serves ("METHOD /path",
// as net/http patterns), read from the registration the socket uses: the
// API's OpenAPI document is checked against it.
func SubmitRoutes() []string {
	var p patterns
	(&server{packs: &packAPI{}}).submitRoutes(&p)
	return p
}

// ControlRoutes lists the routes the control socket serves, as
// SubmitRoutes does.
func ControlRoutes() []string {
	var p patterns
	(&server{packs: &packAPI{}}).controlRoutes(&p)
	return p
}
