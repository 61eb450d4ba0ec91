package api

import (
	"mime"
	"net/http"
)

// The checks below keep web pages a user has open in a browser away from a collector the user
// can reach: docs/SECURITY.md, "Browsers".

// AcceptedBodyTypes names, for error messages, the media types a request body may be sent as.
const AcceptedBodyTypes = "application/json, application/x-ndjson, application/ndjson or application/jsonl"

// JSONBody reports whether r declares its body as JSON or NDJSON (AcceptedBodyTypes; parameters
// such as charset allowed, the type's case ignored). A browser sends a page's cross-site form
// (text/plain, application/x-www-form-urlencoded, multipart/form-data) without asking the
// server first, but never one of these types, so requiring them keeps other sites' pages from
// posting events even where no Origin or Sec-Fetch-Site header gives them away.
func JSONBody(r *http.Request) bool {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	switch mediaType { // lower case from ParseMediaType
	case "application/json", "application/x-ndjson", "application/ndjson", "application/jsonl":
		return true
	}
	return false
}

// RequireJSON answers 415 naming the accepted types, before the body is read, unless r declares
// a JSON or NDJSON body (JSONBody); otherwise it runs serve. The connection is closed after a
// 415: draining a body nobody will read would only hold it.
func RequireJSON(serve func(http.ResponseWriter, *http.Request) int) func(http.ResponseWriter, *http.Request) int {
	return func(w http.ResponseWriter, r *http.Request) int {
		if !JSONBody(r) {
			w.Header().Set("Connection", "close")
			return Error(w, http.StatusUnsupportedMediaType, "Content-Type", "must be "+AcceptedBodyTypes)
		}
		return serve(w, r)
	}
}
