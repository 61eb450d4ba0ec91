package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRequireJSON(t *testing.T) {
	tests := []struct {
		contentType string
		want        int
	}{
		{"application/json", 202},
		{"application/json; charset=utf-8", 202},
		{"Application/JSON; Charset=UTF-8", 202},
		{"application/x-ndjson", 202},
		{"application/ndjson", 202},
		{"application/jsonl", 202},
		{"", 415},
		{"text/plain", 415},
		{"text/plain; charset=utf-8", 415},
		{"application/x-www-form-urlencoded", 415},
		{"multipart/form-data; boundary=x", 415},
		{"application/json-seq", 415},
		{"application/jsonx", 415},
		{"text/json", 415},
		{"application/json;", 202},         // a trailing semicolon is allowed
		{"application/json; charset", 415}, // a malformed parameter is refused, not guessed at
		{"text/plain, application/json", 415},
	}
	for _, tt := range tests {
		t.Run(tt.contentType, func(t *testing.T) {
			served := false
			h := RequireJSON(func(w http.ResponseWriter, _ *http.Request) int {
				served = true
				return JSON(w, http.StatusAccepted, struct{}{})
			})
			req := httptest.NewRequest("POST", "/v1/events", strings.NewReader(`{}`))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			w := httptest.NewRecorder()
			code := h(w, req)
			if code != tt.want || w.Code != tt.want || served != (tt.want == 202) {
				t.Fatalf("got %d (written %d, served %v) %s; want %d", code, w.Code, served, w.Body, tt.want)
			}
			if tt.want != 415 {
				return
			}
			var e struct{ Error, Field string }
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Field != "Content-Type" || !strings.Contains(e.Error, "application/x-ndjson") {
				t.Errorf("got body %s; want a JSON error on Content-Type naming the accepted types", w.Body)
			}
		})
	}
}

// Whatever JSONBody accepts starts with one of the accepted types, in any case, followed by
// nothing, white space or a parameter.
func FuzzJSONBody(f *testing.F) {
	for _, s := range []string{"application/json", "application/x-ndjson; charset=utf-8", "text/plain", "application/json;", "application/json; charset", "APPLICATION/JSONL", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, contentType string) {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("Content-Type", contentType)
		if !JSONBody(r) {
			return
		}
		lower := strings.ToLower(strings.TrimSpace(contentType))
		for _, mt := range []string{"application/json", "application/x-ndjson", "application/ndjson", "application/jsonl"} {
			if rest, ok := strings.CutPrefix(lower, mt); ok && (rest == "" || strings.TrimLeft(rest, " \t")[0] == ';') {
				return
			}
		}
		t.Fatalf("JSONBody(%q): got true; want false: not one of %s", contentType, AcceptedBodyTypes)
	})
}
