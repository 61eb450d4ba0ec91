package auth

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tallypipeline/tally/collector/collectorconf"
)

// clock is a settable time source, so token expiry and token buckets are tested without sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

const tokenKey = "0123456789abcdef0123456789abcdef"

const (
	ingestSecret = "tally_ingest-secret-for-tests-0000000000000"
	readSecret   = "tally_read-secret-for-tests-00000000000000"
	likeSecret   = "tally_like-secret-for-tests-00000000000000"
	adminSecret  = "tally_admin-secret-for-tests-0000000000000"
	slowSecret   = "tally_slow-secret-for-tests-00000000000000"
	billSecret   = "tally_bill-secret-for-tests-00000000000000"
)

// server is the guard in front of a stand-in API (the real handlers need Kafka and Redis; the
// guard's decisions do not), served over loopback HTTP. The stand-in answers 200 with the
// route it served and what the guard put in the context.
func server(t *testing.T, clk *clock) (*httptest.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	g, err := New(Options{
		Keys: []collectorconf.APIKey{
			{ID: "ingest", SHA256: HashSecret(ingestSecret), Scopes: []string{"ingest"}, Rate: 1000, Burst: 1000},
			{ID: "read", SHA256: HashSecret(readSecret), Scopes: []string{"read"}, Rate: 1000, Burst: 1000},
			{ID: "like", SHA256: HashSecret(likeSecret), Scopes: []string{"like", "read"}, Rate: 1000, Burst: 1000},
			{ID: "admin", SHA256: HashSecret(adminSecret), Scopes: []string{"admin"}, Rate: 1000, Burst: 1000},
			{ID: "slow", SHA256: HashSecret(slowSecret), Scopes: []string{"ingest"}, Rate: 0.5, Burst: 2},
			{ID: "billing", SHA256: HashSecret(billSecret), Scopes: []string{"billing"}, Rate: 1000, Burst: 1000},
		},
		UserTokenKey: []byte(tokenKey), Now: clk.now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	api := http.NewServeMux()
	for _, rt := range CollectorRoutes() {
		api.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(map[string]string{"route": rt.Pattern, "key": KeyID(r.Context())})
		})
	}
	api.HandleFunc("GET /v1/unlisted", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"route":"unlisted"}`) })
	srv := httptest.NewServer(g.Wrap(api, CollectorRoutes()))
	t.Cleanup(func() { srv.Client().CloseIdleConnections(); srv.Close() })
	return srv, reg
}

type answer struct {
	code       int
	body       string
	retryAfter string
	challenge  string
}

func send(t *testing.T, srv *httptest.Server, method, path, key, bearer string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(KeyHeader, key)
	}
	if bearer != "" {
		req.Header.Set("Authorization", bearer)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate")}
}

func TestScopes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs after the servers close
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	srv, reg := server(t, clk)
	u42, err := MintUserToken([]byte(tokenKey), "u42", clk.now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, key string
		want                    int
		wantIn                  string // in the body
	}{
		{"health is public", "GET", "/healthz", "", 200, "/healthz"},
		{"ready is public", "GET", "/readyz", "", 200, "/readyz"},
		{"views without a key", "POST", "/v1/views", "", 401, "X-API-Key is missing"},
		{"views with an unknown key", "POST", "/v1/views", "tally_nobody-knows-this-key-000000000000000", 401, "not a known key"},
		{"views with a key's hash as the key", "POST", "/v1/views", HashSecret(ingestSecret), 401, "not a known key"},
		{"views with ingest", "POST", "/v1/views", ingestSecret, 200, `"key":"ingest"`},
		{"events with ingest", "POST", "/v1/events", ingestSecret, 200, "/v1/events"},
		{"views with read", "POST", "/v1/views", readSecret, 403, `lacks the ingest scope`},
		{"counts with read", "GET", "/v1/counts?ids=a", readSecret, 200, "/v1/counts"},
		{"item counts with read", "GET", "/v1/items/a/counts", readSecret, 200, "counts"},
		{"series with read", "GET", "/v1/items/a/views", readSecret, 200, "views"},
		{"liked-by with read", "GET", "/v1/users/u42/likes?ids=a", readSecret, 200, "likes"},
		{"counts with ingest", "GET", "/v1/counts?ids=a", ingestSecret, 403, "lacks the read scope"},
		{"counts without a key", "GET", "/v1/counts?ids=a", "", 401, "X-API-Key"},
		{"like with read", "PUT", "/v1/items/a/likes/u42", readSecret, 403, "lacks the like scope"},
		{"daily report with billing", "GET", "/v1/reports/daily/2026-11-28", billSecret, 200, `"key":"billing"`},
		{"daily report with read", "GET", "/v1/reports/daily/2026-11-28", readSecret, 403, "lacks the billing scope"},
		{"daily report with admin", "GET", "/v1/reports/daily/2026-11-28", adminSecret, 200, "/v1/reports/daily/"},
		{"counts with billing", "GET", "/v1/counts?ids=a", billSecret, 403, "lacks the read scope"},
		{"everything with admin", "POST", "/v1/views", adminSecret, 200, `"key":"admin"`},
		{"unlisted route with read", "GET", "/v1/unlisted", readSecret, 403, "admin"},
		{"unlisted route with admin", "GET", "/v1/unlisted", adminSecret, 200, "unlisted"},
		{"unknown path without a key", "GET", "/v2/anything", "", 401, "X-API-Key"},
		{"unknown path with admin", "GET", "/v2/anything", adminSecret, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bearer := ""
			if strings.Contains(tt.path, "/likes/") {
				bearer = "Bearer " + u42
			}
			got := send(t, srv, tt.method, tt.path, tt.key, bearer)
			if got.code != tt.want || !strings.Contains(got.body, tt.wantIn) {
				t.Errorf("got %d %s; want %d containing %q", got.code, got.body, tt.want, tt.wantIn)
			}
			if got.code == 401 && !strings.HasPrefix(got.challenge, "ApiKey ") {
				t.Errorf("got WWW-Authenticate %q; want an ApiKey challenge", got.challenge)
			}
			if got.code >= 400 && got.code != 404 && !strings.Contains(got.body, `"error":`) {
				t.Errorf("got body %s; want a JSON error", got.body)
			}
		})
	}
	if got := counter(t, reg, "read", "forbidden"); got != 4 {
		t.Errorf("got tally_auth_requests_total{key=read,outcome=forbidden} %v; want 3 (views, like, unlisted)", got)
	}
}

func TestLikesNeedTheUsersToken(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs after the servers close
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	srv, _ := server(t, clk)
	mint := func(key []byte, user string, ttl time.Duration) string {
		s, err := MintUserToken(key, user, clk.now(), ttl)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	u42 := mint([]byte(tokenKey), "u42", time.Hour)
	shortLived := mint([]byte(tokenKey), "u42", time.Minute)
	clk.add(2 * time.Minute)
	forged := mint([]byte("another-key-another-key-another-"), "u42", time.Hour)
	future := "Bearer " + func() string {
		s, err := MintUserToken([]byte(tokenKey), "u42", clk.now().Add(time.Hour), time.Hour) // issued in the future
		if err != nil {
			t.Fatal(err)
		}
		return s
	}()
	parts := strings.Split(strings.TrimPrefix(u42, "Bearer "), ".")
	algNone := "Bearer eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + "."
	tests := []struct {
		name, method, path, bearer string
		want                       int
		wantIn                     string
	}{
		{"like with the user's token", "PUT", "/v1/items/a/likes/u42", u42, 200, `"route":"PUT /v1/items/{item_id}/likes/{user_id}"`},
		{"unlike with the user's token", "DELETE", "/v1/items/a/likes/u42", u42, 200, `"route":"DELETE /v1/items/{item_id}/likes/{user_id}"`},
		{"like for another user", "PUT", "/v1/items/a/likes/u7", u42, 403, "another user"},
		{"unlike for another user", "DELETE", "/v1/items/a/likes/u7", u42, 403, "another user"},
		{"like without a token", "PUT", "/v1/items/a/likes/u42", "", 401, "no user token"},
		{"like with an expired token", "PUT", "/v1/items/a/likes/u42", shortLived, 401, "expired"},
		{"like with a forged token", "PUT", "/v1/items/a/likes/u42", forged, 401, "invalid"},
		{"like with a token issued in the future", "PUT", "/v1/items/a/likes/u42", future, 401, "invalid"},
		{"like with alg none", "PUT", "/v1/items/a/likes/u42", algNone, 401, "invalid"},
		{"like with a Basic header", "PUT", "/v1/items/a/likes/u42", "Basic dTQyOnB3", 401, "Bearer"},
		{"like with garbage", "PUT", "/v1/items/a/likes/u42", "Bearer x.y.z", 401, "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := send(t, srv, tt.method, tt.path, likeSecret, tt.bearer)
			if got.code != tt.want || !strings.Contains(got.body, tt.wantIn) {
				t.Errorf("got %d %s; want %d containing %q", got.code, got.body, tt.want, tt.wantIn)
			}
			if got.code == 401 && !strings.HasPrefix(got.challenge, `Bearer realm="tally", error="invalid_token"`) {
				t.Errorf("got WWW-Authenticate %q; want a Bearer invalid_token challenge", got.challenge)
			}
		})
	}
	t.Run("no user-token key configured", func(t *testing.T) {
		g, err := New(Options{Keys: []collectorconf.APIKey{{ID: "like", SHA256: HashSecret(likeSecret), Scopes: []string{"like"}, Rate: 1, Burst: 1}},
			Now: clk.now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(g.Wrap(http.NotFoundHandler(), CollectorRoutes()))
		defer s.Close()
		defer s.Client().CloseIdleConnections()
		if got := send(t, s, "PUT", "/v1/items/a/likes/u42", likeSecret, u42); got.code != 401 || !strings.Contains(got.body, "user_token_key is not set") {
			t.Errorf("got %d %s; want 401 saying no user-token key is set", got.code, got.body)
		}
	})
}

// Each key has its own token bucket: over its burst it gets 429 with a Retry-After saying when
// a token is back, other keys are unaffected, and the bucket refills at the key's rate.
func TestRateLimitPerKey(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs after the servers close
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	srv, reg := server(t, clk)
	steps := []struct {
		name       string
		advance    time.Duration
		key        string
		want       int
		retryAfter string
	}{
		{"first of burst 2", 0, slowSecret, 200, ""},
		{"second of burst 2", 0, slowSecret, 200, ""},
		{"over the burst", 0, slowSecret, 429, "2"}, // 0.5/s: the next token in 2 s
		{"another key is unaffected", 0, ingestSecret, 200, ""},
		{"still early", 1500 * time.Millisecond, slowSecret, 429, "1"},
		{"a refused request took no token", 500 * time.Millisecond, slowSecret, 200, ""},
		{"bucket empty again", 0, slowSecret, 429, "2"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			clk.add(st.advance)
			got := send(t, srv, "POST", "/v1/views", st.key, "")
			if got.code != st.want || got.retryAfter != st.retryAfter {
				t.Errorf("got %d Retry-After %q %s; want %d Retry-After %q", got.code, got.retryAfter, got.body, st.want, st.retryAfter)
			}
			if got.code == 429 && !strings.Contains(got.body, `over its rate limit`) {
				t.Errorf("got body %s; want a JSON error naming the rate limit", got.body)
			}
		})
	}
	if got := counter(t, reg, "slow", "rate_limited"); got != 3 {
		t.Errorf("got tally_auth_requests_total{key=slow,outcome=rate_limited} %v; want 3", got)
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for _, tt := range []struct {
		wait time.Duration
		want int
	}{{time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {90 * time.Second, 90}} {
		t.Run(tt.wait.String(), func(t *testing.T) {
			if got := retryAfter(tt.wait); got != tt.want {
				t.Errorf("got %d; want %d", got, tt.want)
			}
		})
	}
}

func TestNewRejectsBadKeys(t *testing.T) {
	good := collectorconf.APIKey{ID: "a", SHA256: HashSecret(ingestSecret), Scopes: []string{"ingest"}, Rate: 1, Burst: 1}
	tests := []struct {
		name string
		keys []collectorconf.APIKey
		want string
	}{
		{"short hash", []collectorconf.APIKey{{ID: "a", SHA256: "abc", Scopes: []string{"read"}, Rate: 1, Burst: 1}}, "64 hex digits"},
		{"unknown scope", []collectorconf.APIKey{{ID: "a", SHA256: good.SHA256, Scopes: []string{"write"}, Rate: 1, Burst: 1}}, `unknown scope "write"`},
		{"zero rate", []collectorconf.APIKey{{ID: "a", SHA256: good.SHA256, Scopes: []string{"read"}, Burst: 1}}, "rate 0"},
		{"same secret twice", []collectorconf.APIKey{good, {ID: "b", SHA256: strings.ToUpper(good.SHA256), Scopes: []string{"read"}, Rate: 1, Burst: 1}}, "another key's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{Keys: tt.keys})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// counter is tally_auth_requests_total{key, outcome} in reg (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, key, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tally_auth_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["key"] == key && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A served route the policy does not list is named, so that the collector refuses to start
// rather than leave it to the admin scope.
func TestUnlisted(t *testing.T) {
	var listed []string
	for _, rt := range CollectorRoutes() {
		listed = append(listed, rt.Pattern)
	}
	tests := []struct {
		name   string
		served []string
		want   []string
	}{
		{"every route listed", listed, nil},
		{"a new route", append(listed[:2:2], "GET /v1/new", "POST /v1/views"), []string{"GET /v1/new"}},
		{"the same path, another method", []string{"DELETE /v1/counts"}, []string{"DELETE /v1/counts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Unlisted(tt.served); !slices.Equal(got, tt.want) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}
