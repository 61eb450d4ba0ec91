// Package web serves the collector's live page at "/": plain HTML, CSS and a small script,
// embedded in the binary, that read the public API from the browser (counts, series, clicks,
// top lists) every couple of seconds. The page holds no data of its own: with access control on,
// it asks for an API key with the read scope and sends it like any client. Handlers are
// stateless and safe for concurrent requests.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Routes are the page's patterns; they need no key (the page is static, its data calls do).
func Routes() []string { return []string{"GET /{$}", "GET /ui/{file}"} }

// Register serves the page on mux.
func Register(mux *http.ServeMux) {
	files, _ := fs.Sub(static, "static") // "static" is embedded above, so Sub cannot fail
	assets := http.FileServerFS(files)
	mux.HandleFunc(Routes()[0], func(w http.ResponseWriter, r *http.Request) {
		header(w)
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc(Routes()[1], func(w http.ResponseWriter, r *http.Request) {
		header(w)
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + r.PathValue("file")
		assets.ServeHTTP(w, r2)
	})
}

// header keeps the page to its own origin: no inline script, no framing, no outside requests.
func header(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}
