// Package openapi holds the collector's API contract, an OpenAPI 3.1 document kept beside the
// code (openapi.json) and served at /openapi.json. TestOpenAPIContract (package collector)
// sends real requests for every route and status to running collectors and validates both
// sides against it, so the document cannot drift from the code. The handler is stateless.
package openapi

import (
	_ "embed"
	"net/http"
)

//go:embed openapi.json
var document []byte

// Pattern is the route serving the document.
const Pattern = "GET /openapi.json"

// Document returns the OpenAPI document (a copy: callers may not change the served one).
func Document() []byte { return append([]byte(nil), document...) }

// Register serves the document on mux.
func Register(mux *http.ServeMux) {
	mux.HandleFunc(Pattern, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(document)
	})
}
