package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tallypipeline/tally/collector/collectorconf"
)

// BenchmarkGuard is the cost the guard adds to one request (key hash, bucket, scope; and for a
// like the token's HMAC), without the network.
func BenchmarkGuard(b *testing.B) {
	g, err := New(Options{Keys: []collectorconf.APIKey{{ID: "k", SHA256: HashSecret(likeSecret), Scopes: []string{"ingest", "like"}, Rate: 1e9, Burst: 1e9}},
		UserTokenKey: []byte(tokenKey)})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := MintUserToken([]byte(tokenKey), "u42", time.Now(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	h := g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), CollectorRoutes())
	for _, bc := range []struct {
		name, method, path string
	}{{"view", "POST", "/v1/views"}, {"like", "PUT", "/v1/items/a/likes/u42"}} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(bc.method, bc.path, nil)
			req.Header.Set(KeyHeader, likeSecret)
			req.Header.Set("Authorization", "Bearer "+tok)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("got %d %s; want 200", w.Code, w.Body)
				}
			}
		})
	}
}
