// Package auth is the collector's API access control: producer API keys, stored as SHA-256
// hashes, each with scopes and its own rate limit, and user tokens (HS256 JWTs) that name the
// user a like is for. A Guard wraps the API handler: every request to a route that is not
// public must carry a known key (401 otherwise) holding the route's scope (403), within the
// key's rate (429 with Retry-After); a like must also carry a valid token for the user in its
// path (401 for a missing, forged or expired token, 403 for another user's). Routes the policy
// does not list need the admin scope, so a new route is closed until it is given a scope.
//
// docs/SECURITY.md has the threat model. A Guard has no goroutines; it is safe for concurrent
// requests once built (each key's token bucket is a rate.Limiter, which locks itself).
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/collector/collectorconf"
)

// Scope is what a key may do.
type Scope string

const (
	// Public routes need no key: health checks.
	Public Scope = ""
	// ScopeIngest sends events (POST /v1/views, /v1/events, /v1/view-counts, /v1/clicks) and
	// mints click ids.
	ScopeIngest Scope = "ingest"
	// ScopeRead reads counts, series and a user's likes.
	ScopeRead Scope = "read"
	// ScopeLike likes and unlikes, on behalf of the user a token names.
	ScopeLike Scope = "like"
	// ScopeFraud posts fraud verdicts, which change what advertisers are billed: the fraud
	// system's key, not the ad servers'.
	ScopeFraud Scope = "fraud"
	// ScopeBilling reads the exact daily click reports billing invoices from (GET
	// /v1/reports/daily/{date}): money figures of every advertiser, so not part of read.
	ScopeBilling Scope = "billing"
	// ScopeAdmin holds every scope, and alone reaches routes the policy does not list.
	ScopeAdmin Scope = "admin"
)

// Headers the client sends.
const (
	// KeyHeader carries the producer API key.
	KeyHeader = "X-API-Key"
	// The user token travels as "Authorization: Bearer <token>".
	tokenHeader = "Authorization"
)

// Route is the access policy of one ServeMux pattern.
type Route struct {
	Pattern string // as registered on the API's ServeMux, e.g. "PUT /v1/items/{item_id}/likes/{user_id}"
	Scope   Scope
	// User names the path wildcard holding the user the request acts for; when set, the request
	// must carry a user token for that very user.
	User string
}

// Options builds a Guard.
type Options struct {
	Keys         []collectorconf.APIKey
	UserTokenKey []byte                // HMAC key of user tokens; empty: every like is refused with 401
	Now          func() time.Time      // default time.Now
	Logger       *slog.Logger          // refusals at debug level; default none
	Registerer   prometheus.Registerer // tally_auth_requests_total; nil: not registered
}

// Guard checks requests against the configured keys.
type Guard struct {
	keys     map[[sha256.Size]byte]*key
	tokenKey []byte
	now      func() time.Time
	logger   *slog.Logger
	requests *prometheus.CounterVec
}

type key struct {
	id      string
	scopes  map[Scope]bool
	limiter *rate.Limiter
}

func (k *key) has(s Scope) bool { return k.scopes[s] || k.scopes[ScopeAdmin] }

// New returns a guard for opts.Keys. It checks what the collector's settings check
// (collectorconf.Settings.Validate), so a Guard built without the config loader is as strict.
func New(opts Options) (*Guard, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Guard{keys: map[[sha256.Size]byte]*key{}, tokenKey: opts.UserTokenKey, now: opts.Now, logger: opts.Logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_auth_requests_total",
			Help: "Requests to guarded collector routes by API key id (empty when none matched) and outcome: ok, no_key, bad_key, rate_limited, forbidden, bad_user_token, other_user.",
		}, []string{"key", "outcome"})}
	for i, c := range opts.Keys {
		var h [sha256.Size]byte
		if b, err := hex.DecodeString(c.SHA256); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("key %d (%q): sha256 %q is not 64 hex digits", i, c.ID, c.SHA256)
		} else {
			copy(h[:], b)
		}
		if _, dup := g.keys[h]; dup {
			return nil, fmt.Errorf("key %d (%q): its secret is another key's", i, c.ID)
		}
		if !(c.Rate > 0) || c.Burst < 1 {
			return nil, fmt.Errorf("key %d (%q): rate %g and burst %d; want both above 0", i, c.ID, c.Rate, c.Burst)
		}
		k := &key{id: c.ID, scopes: map[Scope]bool{}, limiter: rate.NewLimiter(rate.Limit(c.Rate), c.Burst)}
		for _, s := range c.Scopes {
			switch sc := Scope(s); sc {
			case ScopeIngest, ScopeRead, ScopeLike, ScopeFraud, ScopeBilling, ScopeAdmin:
				k.scopes[sc] = true
			default:
				return nil, fmt.Errorf("key %d (%q): unknown scope %q", i, c.ID, s)
			}
		}
		g.keys[h] = k
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(g.requests); err != nil {
			return nil, fmt.Errorf("register auth metrics: %w", err)
		}
	}
	return g, nil
}

// CollectorRoutes is the policy of the collector's API. A route added to the API without an
// entry here needs the admin scope.
func CollectorRoutes() []Route {
	return []Route{
		{Pattern: "GET /healthz", Scope: Public},
		{Pattern: "GET /readyz", Scope: Public},
		// The live page is static; the API calls it makes carry the key the user enters.
		{Pattern: "GET /{$}", Scope: Public},
		{Pattern: "GET /ui/{file}", Scope: Public},
		{Pattern: "GET /openapi.json", Scope: Public},
		{Pattern: "POST /v1/views", Scope: ScopeIngest},
		{Pattern: "POST /v1/events", Scope: ScopeIngest},
		{Pattern: "POST /v1/view-counts", Scope: ScopeIngest},
		{Pattern: "POST /v1/clicks", Scope: ScopeIngest},
		{Pattern: "POST /v1/ads/{ad_id}/click-ids", Scope: ScopeIngest},
		{Pattern: "POST /v1/fraud-verdicts", Scope: ScopeFraud},
		{Pattern: "GET /v1/ads/{ad_id}/clicks", Scope: ScopeRead},
		{Pattern: "GET /v1/campaigns/{campaign_id}/clicks", Scope: ScopeRead},
		{Pattern: "GET /v1/devices/{device}/clicks", Scope: ScopeRead},
		{Pattern: "GET /v1/items/{item_id}/counts", Scope: ScopeRead},
		{Pattern: "GET /v1/counts", Scope: ScopeRead},
		{Pattern: "GET /v1/items/{item_id}/views", Scope: ScopeRead},
		{Pattern: "GET /v1/users/{user_id}/likes", Scope: ScopeRead},
		{Pattern: "GET /v1/reports/daily/{date}", Scope: ScopeBilling},
		{Pattern: "GET /v1/top", Scope: ScopeRead},
		{Pattern: "PUT /v1/items/{item_id}/likes/{user_id}", Scope: ScopeLike, User: "user_id"},
		{Pattern: "DELETE /v1/items/{item_id}/likes/{user_id}", Scope: ScopeLike, User: "user_id"},
		// Generic counters: each namespace also lists the keys that may write and read it.
		{Pattern: "PUT /v1/namespaces/{ns}", Scope: ScopeAdmin},
		{Pattern: "GET /v1/namespaces/{ns}", Scope: ScopeAdmin},
		{Pattern: "DELETE /v1/namespaces/{ns}", Scope: ScopeAdmin},
		{Pattern: "POST /v1/namespaces/{ns}/counters/{name}/add", Scope: ScopeIngest},
		{Pattern: "POST /v1/namespaces/{ns}/adds", Scope: ScopeIngest},
		{Pattern: "POST /v1/namespaces/{ns}/counters/{name}/add-and-get", Scope: ScopeIngest},
		{Pattern: "POST /v1/namespaces/{ns}/counters/{name}/clear", Scope: ScopeIngest},
		{Pattern: "POST /v1/namespaces/{ns}/counters/{name}/add-distinct", Scope: ScopeIngest},
		{Pattern: "GET /v1/namespaces/{ns}/counters/{name}/distinct", Scope: ScopeRead},
		{Pattern: "GET /v1/namespaces/{ns}/counters/{name}", Scope: ScopeRead},
		{Pattern: "GET /v1/namespaces/{ns}/counters", Scope: ScopeRead},
	}
}

// Unlisted returns the patterns of served that CollectorRoutes does not list: routes that
// would fall to the admin scope. The collector refuses to start with any, so a new route must
// say who may call it.
func Unlisted(served []string) []string {
	listed := map[string]bool{}
	for _, rt := range CollectorRoutes() {
		listed[rt.Pattern] = true
	}
	var out []string
	for _, p := range served {
		if !listed[p] {
			out = append(out, p)
		}
	}
	return out
}

// Wrap returns next behind the guard. Requests are matched to routes by a ServeMux with the
// same patterns as the API's, so the policy sees the route (and path values) that next will
// serve; a request no route matches needs the admin scope.
func (g *Guard) Wrap(next http.Handler, routes []Route) http.Handler {
	m := http.NewServeMux()
	for _, rt := range routes {
		m.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, rt, next) })
	}
	other := Route{Scope: ScopeAdmin}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, other, next) })
	return m
}

type ctxKey int

const keyIDCtx ctxKey = 0

// KeyID is the id of the API key that authorized the request, "" when none did (public route,
// or auth off).
func KeyID(ctx context.Context) string { s, _ := ctx.Value(keyIDCtx).(string); return s }

func (g *Guard) serve(w http.ResponseWriter, r *http.Request, rt Route, next http.Handler) {
	if rt.Scope == Public {
		next.ServeHTTP(w, r)
		return
	}
	secret := r.Header.Get(KeyHeader)
	if secret == "" {
		g.deny(w, r, "", "no_key", http.StatusUnauthorized, KeyHeader, "is missing: this API needs a producer key (docs/API.md)")
		return
	}
	k := g.keys[sha256.Sum256([]byte(secret))]
	if k == nil {
		g.deny(w, r, "", "bad_key", http.StatusUnauthorized, KeyHeader, "is not a known key")
		return
	}
	now := g.now()
	if res := k.limiter.ReserveN(now, 1); res.DelayFrom(now) > 0 {
		wait := res.DelayFrom(now)
		res.CancelAt(now)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter(wait)))
		g.deny(w, r, k.id, "rate_limited", http.StatusTooManyRequests, "",
			fmt.Sprintf("key %q is over its rate limit; retry after %s", k.id, wait.Round(time.Millisecond)))
		return
	}
	if !k.has(rt.Scope) {
		g.deny(w, r, k.id, "forbidden", http.StatusForbidden, "",
			fmt.Sprintf("key %q lacks the %s scope this route needs", k.id, scopeName(rt.Scope)))
		return
	}
	ctx := context.WithValue(r.Context(), keyIDCtx, k.id)
	if rt.User != "" {
		user, err := g.verifyUserToken(r.Header.Get(tokenHeader), now)
		if err != nil {
			desc := strings.ReplaceAll(err.Error(), `"`, `'`)
			w.Header().Set("WWW-Authenticate", `Bearer realm="tally", error="invalid_token", error_description="`+desc+`"`)
			g.deny(w, r, k.id, "bad_user_token", http.StatusUnauthorized, tokenHeader, err.Error())
			return
		}
		if want := r.PathValue(rt.User); user != want {
			g.deny(w, r, k.id, "other_user", http.StatusForbidden, rt.User,
				fmt.Sprintf("is %q but the user token is for another user", want))
			return
		}
	}
	g.requests.WithLabelValues(k.id, "ok").Inc()
	next.ServeHTTP(w, r.WithContext(ctx))
}

func (g *Guard) deny(w http.ResponseWriter, r *http.Request, keyID, outcome string, code int, field, reason string) {
	g.requests.WithLabelValues(keyID, outcome).Inc()
	g.logger.Debug("request refused", "method", r.Method, "path", r.URL.Path, "key", keyID, "outcome", outcome, "code", code)
	if code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", `ApiKey realm="tally", header="`+KeyHeader+`"`)
	}
	api.Error(w, code, field, reason)
}

// retryAfter is wait in whole seconds, rounded up: Retry-After has no fractions, and a client
// that retries a little early is refused again.
func retryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

func scopeName(s Scope) string {
	if s == ScopeAdmin {
		return "admin (the route has no other scope)"
	}
	return string(s)
}
