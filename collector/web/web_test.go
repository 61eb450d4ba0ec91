package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPage(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux)
	tests := []struct {
		path     string
		want     int
		wantType string
		wantBody string
	}{
		{"/", 200, "text/html", `<script src="/ui/app.js"`},
		{"/ui/app.js", 200, "text/javascript", "/v1/counts?ids="},
		{"/ui/style.css", 200, "text/css", "--accent"},
		{"/ui/nope.js", 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			if rec.Code != tt.want {
				t.Fatalf("status: got %d; want %d", rec.Code, tt.want)
			}
			if tt.want != 200 {
				return
			}
			if got := rec.Header().Get("Content-Type"); !strings.HasPrefix(got, tt.wantType) {
				t.Errorf("Content-Type: got %q; want %s", got, tt.wantType)
			}
			if got := rec.Header().Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
				t.Errorf("CSP: got %q; want default-src 'self'", got)
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("body lacks %q", tt.wantBody)
			}
		})
	}
}
