package collector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/openapi"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestOpenAPIContract sends real requests for every route and documented status to a running
// collector (access control on; a second one without Redis or a click signing key for the
// statuses only they give) and validates each request and each answer against
// openapi/openapi.json, so the document cannot drift from the code: an undocumented status, a
// field the schema does not allow, a missing required header (Retry-After), a route missing
// from the document, a documented status no request provoked all fail here.
func TestOpenAPIContract(t *testing.T) {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.Document())
	if err != nil {
		t.Fatalf("load the document: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("the document is not valid OpenAPI: %v", err)
	}
	if doc.OpenAPIMajorMinor() != "3.1" {
		t.Fatalf("openapi: got %s; want 3.1", doc.OpenAPI)
	}
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)

	const (
		producer = "tally_producer-secret-for-the-contract-test"
		app      = "tally_app-secret-for-the-contract-test-0000"
		tight    = "tally_tight-secret-for-the-contract-test-00"
		fraud    = "tally_fraud-secret-for-the-contract-test-00"
		billing  = "tally_billing-secret-for-the-contract-test"
		admin    = "tally_admin-secret-for-the-contract-test-000"
		tokenKey = "contract-test-user-token-key-0123456789ab"
	)
	keys := strings.Join([]string{
		"producer:" + auth.HashSecret(producer) + ":ingest:1000:1000",
		"app:" + auth.HashSecret(app) + ":read+like:1000:1000",
		"tight:" + auth.HashSecret(tight) + ":read:0.01:1",
		"fraud:" + auth.HashSecret(fraud) + ":fraud:1000:1000",
		"billing:" + auth.HashSecret(billing) + ":billing:1000:1000",
		"admin:" + auth.HashSecret(admin) + ":admin:1000:1000",
	}, ",")
	// Click ids are signed with a key of 32 zero bytes, which the test mints with too.
	clickKeys, err := schemas.NewClickIDKeys("t1", []schemas.ClickIDKey{{ID: "t1", Secret: make([]byte, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	clickID, err := clickKeys.Mint("contract-ad", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	api, _ := collector(t, "--collector.auth.enabled", "on", "--collector.auth.keys", keys, "--collector.auth.user_token_key", tokenKey,
		"--clicks.keys", "t1:"+strings.Repeat("A", 43), "--clicks.signing_key", "t1",
		"--collector.max_body_bytes", "2048", "--collector.max_lines", "5", "--collector.max_concurrent_bodies", "1",
		"--collector.read_timeout", "2s", "--collector.read_header_timeout", "1s") // a body still arriving at 2 s gets 408
	// A second collector, open on loopback, with no click signing key, a Redis that is not there
	// and a broker of its own: minting ids is refused (409), reads and likes are unavailable
	// while ingest goes on and readiness is degraded; once its broker is gone it is not ready.
	deadRedis, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ownKafka, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer ownKafka.Close()
	broken, _ := startCollector(t, "--redis.addr", deadRedis, "--kafka.brokers", ownKafka.ListenAddrs()[0])
	doc.Servers = openapi3.Servers{{URL: api}, {URL: broken}}
	// A complete version of a daily click report, as the nightly job leaves it, in the
	// collector's database (its migrations ran at start).
	ch, err := chclient.Open(ctx, chclient.Options{Addr: infra.ClickHouse.Addr(), Database: "tally", Username: "default", Password: testinfra.ClickHousePassword})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range []string{
		`INSERT INTO click_reports_daily (date, version, ad_id, exact_count, billable_count, computed_at) VALUES ('2026-11-28', 1, 'contract-ad', 3, 2, now64(3))`,
		`INSERT INTO click_reports_by (date, version, dimension, value, exact_count, billable_count) VALUES ('2026-11-28', 1, 'campaign', 'contract-campaign', 3, 2)`,
		`INSERT INTO click_report_versions (date, version, started_at, computed_at, source, ads, exact_count, billable_count, duplicates, fraud, records_read)
			VALUES ('2026-11-28', 1, now64(3), now64(3), 'kafka', 1, 3, 2, 1, 1, 5)`,
	} {
		if err := ch.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	u42, err := auth.MintUserToken([]byte(tokenKey), "u42", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	P := map[string]string{"X-API-Key": producer}
	A := map[string]string{"X-API-Key": app}
	AU := map[string]string{"X-API-Key": app, "Authorization": "Bearer " + u42}
	F := map[string]string{"X-API-Key": fraud}
	B := map[string]string{"X-API-Key": billing}
	AD := map[string]string{"X-API-Key": admin}
	const ns, ctr = "/v1/namespaces/contract", "/v1/namespaces/contract/counters/c1"
	huge := `{"delta":9223372036854775000}`
	view := `{"item_id":"contract-item","viewer_id":"v1"}`
	click := `{"click_id":"` + clickID + `","ad_id":"contract-ad","campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"web","fraud_score":0.1}`
	verdict := `{"click_id":"` + clickID + `","verdict":"fraud","reason":"test","decided_at":` + fmt.Sprint(time.Now().UnixMilli()) + `}`
	viewCount := `{"item_id":"contract-item","second":` + fmt.Sprint(time.Now().Unix()) + `,"count":40,"source_id":"edge-1","seq":3}`
	big := `{"item_id":"contract-item","viewer_id":"` + strings.Repeat("v", 3000) + `"}`
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		want                     int
		badRequest               bool // the request itself breaks the document (to see the 400)
		slow                     bool // the body stops arriving before its end (to see the 408)
	}{
		{"page", "GET", "/", "", nil, 200, false, false},
		{"document", "GET", "/openapi.json", "", nil, 200, false, false},
		{"alive", "GET", "/healthz", "", nil, 200, false, false},
		{"ready", "GET", "/readyz", "", nil, 200, false, false},
		{"view", "POST", "/v1/views", view, P, 202, false, false},
		{"view with a bad item", "POST", "/v1/views", `{"item_id":"a/b","viewer_id":"v1"}`, P, 400, true, false},
		{"view too big", "POST", "/v1/views", big, P, 413, true, false},
		{"view arriving too slowly", "POST", "/v1/views", view, P, 408, false, true},
		{"view without a key", "POST", "/v1/views", view, nil, 401, false, false},
		{"view with a read key", "POST", "/v1/views", view, A, 403, false, false},
		{"view as text", "POST", "/v1/views", view, map[string]string{"X-API-Key": producer, "Content-Type": "text/plain"}, 415, true, false},
		{"view from another site's page", "POST", "/v1/views", view,
			map[string]string{"X-API-Key": producer, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403, false, false},
		{"events", "POST", "/v1/events", `{"type":"view","item_id":"contract-item","viewer_id":"v2"}` + "\n" + `{"type":"view","item_id":"","viewer_id":"v3"}`, P, 202, false, false},
		{"events all bad", "POST", "/v1/events", `{"type":"view","item_id":"","viewer_id":"v3"}`, P, 400, false, false},
		{"events over max_lines", "POST", "/v1/events", strings.Repeat(`{"type":"view","item_id":"i","viewer_id":"v"}`+"\n", 6), P, 413, false, false},
		{"events arriving too slowly", "POST", "/v1/events", view, P, 408, false, true},
		{"view count", "POST", "/v1/view-counts", viewCount, P, 202, false, false},
		{"view count of zero", "POST", "/v1/view-counts", strings.Replace(viewCount, `"count":40`, `"count":0`, 1), P, 400, true, false},
		{"view count without seq", "POST", "/v1/view-counts", strings.Replace(viewCount, `,"seq":3`, ``, 1), P, 400, true, false},
		{"view count with a read key", "POST", "/v1/view-counts", viewCount, A, 403, false, false},
		{"view counts too big", "POST", "/v1/view-counts", strings.Repeat(viewCount+"\n", 30), P, 413, false, false},
		{"view count arriving too slowly", "POST", "/v1/view-counts", viewCount, P, 408, false, true},
		{"events with a view count", "POST", "/v1/events", `{"type":"view_count","item_id":"contract-item","second":` + fmt.Sprint(time.Now().Unix()) + `,"count":2,"source_id":"edge-1","seq":4}`, P, 202, false, false},
		{"item counts", "GET", "/v1/items/contract-item/counts", "", A, 200, false, false},
		{"item counts of a bad id", "GET", "/v1/items/a%2Fb/counts", "", A, 400, true, false},
		{"counts", "GET", "/v1/counts?ids=contract-item,other", "", A, 200, false, false},
		{"counts without ids", "GET", "/v1/counts", "", A, 400, true, false},
		{"counts over the rate", "GET", "/v1/counts?ids=x", "", map[string]string{"X-API-Key": tight}, 200, false, false},
		{"counts over the rate again", "GET", "/v1/counts?ids=x", "", map[string]string{"X-API-Key": tight}, 429, false, false},
		{"series", "GET", "/v1/items/contract-item/views?granularity=hour", "", A, 200, false, false},
		{"series with a bad granularity", "GET", "/v1/items/contract-item/views?granularity=week", "", A, 400, true, false},
		{"click", "POST", "/v1/clicks", click, P, 202, false, false},
		{"click for another ad", "POST", "/v1/clicks", strings.Replace(click, `"ad_id":"contract-ad"`, `"ad_id":"other-ad"`, 1), P, 400, false, false},
		{"click with a bad score", "POST", "/v1/clicks", strings.Replace(click, `0.1}`, `2}`, 1), P, 400, true, false},
		{"click with a read key", "POST", "/v1/clicks", click, A, 403, false, false},
		{"click too big", "POST", "/v1/clicks", strings.Replace(click, `"device":"web"`, `"device":"`+strings.Repeat("w", 2100)+`"`, 1), P, 413, true, false},
		{"click arriving too slowly", "POST", "/v1/clicks", click, P, 408, false, true},
		{"verdict", "POST", "/v1/fraud-verdicts", verdict, F, 202, false, false},
		{"verdict with a producer key", "POST", "/v1/fraud-verdicts", verdict, P, 403, false, false},
		{"verdict of another kind", "POST", "/v1/fraud-verdicts", strings.Replace(verdict, `"fraud"`, `"maybe"`, 1), F, 400, true, false},
		{"verdicts too big", "POST", "/v1/fraud-verdicts", strings.Repeat(verdict+"\n", 20), F, 413, false, false},
		{"verdict arriving too slowly", "POST", "/v1/fraud-verdicts", verdict, F, 408, false, true},
		{"mint", "POST", "/v1/ads/contract-ad/click-ids?count=2", "", P, 200, false, false},
		{"mint too many", "POST", "/v1/ads/contract-ad/click-ids?count=1000", "", P, 400, true, false},
		{"click series", "GET", "/v1/ads/contract-ad/clicks?granularity=hour", "", A, 200, false, false},
		{"click series by second", "GET", "/v1/ads/contract-ad/clicks?granularity=second", "", A, 400, true, false},
		{"campaign click series", "GET", "/v1/campaigns/contract-campaign/clicks?granularity=day", "", A, 200, false, false},
		{"campaign click series with a bad id", "GET", "/v1/campaigns/bad%20id/clicks", "", A, 400, true, false},
		{"device click series", "GET", "/v1/devices/web/clicks?granularity=minute", "", A, 200, false, false},
		{"device click series by second", "GET", "/v1/devices/web/clicks?granularity=second", "", A, 400, true, false},
		{"daily report", "GET", "/v1/reports/daily/2026-11-28?limit=10", "", B, 200, false, false},
		{"daily report of a version", "GET", "/v1/reports/daily/2026-11-28?version=1&after=a", "", B, 200, false, false},
		{"daily report by campaign", "GET", "/v1/reports/daily/2026-11-28?by=campaign", "", B, 200, false, false},
		{"daily report by device, a version without that breakdown", "GET", "/v1/reports/daily/2026-11-28?by=device", "", B, 404, false, false},
		{"daily report by an unknown grouping", "GET", "/v1/reports/daily/2026-11-28?by=country", "", B, 400, true, false},
		{"daily report not written yet", "GET", "/v1/reports/daily/2026-11-29", "", B, 404, false, false},
		{"daily report of a bad date", "GET", "/v1/reports/daily/29-11-2026", "", B, 400, true, false},
		{"daily report with a read key", "GET", "/v1/reports/daily/2026-11-28", "", A, 403, false, false},
		{"like", "PUT", "/v1/items/contract-item/likes/u42", "", AU, 200, false, false},
		{"like without a token", "PUT", "/v1/items/contract-item/likes/u42", "", A, 401, false, false},
		{"like as another user", "PUT", "/v1/items/contract-item/likes/u7", "", AU, 403, false, false},
		{"like a bad item", "PUT", "/v1/items/a%20b/likes/u42", "", AU, 400, true, false},
		{"unlike", "DELETE", "/v1/items/contract-item/likes/u42", "", AU, 200, false, false},
		{"unlike a bad item", "DELETE", "/v1/items/a%20b/likes/u42", "", AU, 400, true, false},
		{"liked", "GET", "/v1/users/u42/likes?ids=contract-item", "", A, 200, false, false},
		{"liked without ids", "GET", "/v1/users/u42/likes", "", A, 400, true, false},
		{"top", "GET", "/v1/top?kind=ads&window=24h&k=2", "", A, 200, false, false},
		{"top of a bad window", "GET", "/v1/top?kind=ads&window=2m", "", A, 400, true, false},
		{"top not published yet", "GET", "/v1/top?kind=items&window=1m", "", A, 503, false, false},
		{"namespace created", "PUT", ns, `{"mode":"best_effort","idempotency_window":"1h"}`, AD, 201, false, false},
		{"namespace changed", "PUT", ns, `{"mode":"best_effort","readers":["app"]}`, AD, 200, false, false},
		{"namespace in an unknown mode", "PUT", ns, `{"mode":"exact"}`, AD, 400, true, false},
		{"namespace as text", "PUT", ns, `{"mode":"best_effort"}`, map[string]string{"X-API-Key": admin, "Content-Type": "text/plain"}, 415, true, false},
		{"namespace with a producer key", "PUT", ns, `{"mode":"best_effort"}`, P, 403, false, false},
		{"namespace read", "GET", ns, "", AD, 200, false, false},
		{"namespace of a bad name", "GET", "/v1/namespaces/Bad", "", AD, 400, true, false},
		{"namespace unknown", "GET", "/v1/namespaces/nope", "", AD, 404, false, false},
		{"add", "POST", ctr + "/add", `{"delta":2,"idempotency_token":"k1"}`, P, 200, false, false},
		{"add again", "POST", ctr + "/add", `{"delta":2,"idempotency_token":"k1"}`, P, 200, false, false},
		{"add without a delta", "POST", ctr + "/add", `{"idempotency_token":"k2"}`, P, 400, true, false},
		{"add to an unknown namespace", "POST", "/v1/namespaces/nope/counters/c1/add", `{"delta":1}`, P, 404, false, false},
		{"add past the range", "POST", "/v1/namespaces/contract/counters/big/add", huge, P, 200, false, false},
		{"add past the range again", "POST", "/v1/namespaces/contract/counters/big/add", huge, P, 409, false, false},
		{"add as text", "POST", ctr + "/add", `{"delta":1}`, map[string]string{"X-API-Key": producer, "Content-Type": "text/plain"}, 415, true, false},
		{"add and get", "POST", ctr + "/add-and-get", `{"delta":1,"event_time":"2026-12-04T10:00:00Z"}`, P, 200, false, false},
		{"eventual namespace created", "PUT", "/v1/namespaces/contract-ev", `{"mode":"eventual"}`, AD, 201, false, false},
		{"eventual add", "POST", "/v1/namespaces/contract-ev/counters/c1/add", `{"delta":3,"idempotency_token":"e1"}`, P, 202, false, false},
		{"eventual add and get", "POST", "/v1/namespaces/contract-ev/counters/c1/add-and-get", `{"delta":3,"idempotency_token":"e2"}`, P, 202, false, false},
		{"eventual clear", "POST", "/v1/namespaces/contract-ev/counters/c1/clear", `{"idempotency_token":"e3"}`, P, 202, false, false},
		{"eventual count", "GET", "/v1/namespaces/contract-ev/counters/c1", "", A, 200, false, false},
		{"accurate namespace created", "PUT", "/v1/namespaces/contract-acc", `{"mode":"accurate"}`, AD, 201, false, false},
		{"accurate add and get", "POST", "/v1/namespaces/contract-acc/counters/c1/add-and-get", `{"delta":3,"idempotency_token":"a1"}`, P, 202, false, false},
		{"accurate count", "GET", "/v1/namespaces/contract-acc/counters/c1", "", A, 200, false, false},
		{"adds", "POST", ns + "/adds", `{"adds":[{"name":"c1","delta":1},{"name":"c2","delta":-2,"idempotency_token":"b1"}]}`, P, 200, false, false},
		{"adds to an eventual namespace", "POST", "/v1/namespaces/contract-ev/adds", `{"adds":[{"name":"c1","delta":1,"idempotency_token":"b2"}]}`, P, 202, false, false},
		{"adds, one bad", "POST", ns + "/adds", `{"adds":[{"name":"c1","delta":1},{"name":"c 2","delta":1}]}`, P, 400, true, false},
		{"adds to an unknown namespace", "POST", "/v1/namespaces/nope/adds", `{"adds":[{"name":"c1","delta":1}]}`, P, 404, false, false},
		{"adds past the range", "POST", ns + "/adds", `{"adds":[{"name":"big","delta":9223372036854775000}]}`, P, 409, false, false},
		{"adds as text", "POST", ns + "/adds", `{"adds":[]}`, map[string]string{"X-API-Key": producer, "Content-Type": "text/plain"}, 415, true, false},
		{"add from another site's page", "POST", ctr + "/add", `{"delta":1}`,
			map[string]string{"X-API-Key": producer, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403, false, false},
		{"distinct member", "POST", ctr + "/add-distinct", `{"member":"u1"}`, P, 200, false, false},
		{"distinct member without one", "POST", ctr + "/add-distinct", `{}`, P, 400, true, false},
		{"distinct member in an unknown namespace", "POST", "/v1/namespaces/nope/counters/c1/add-distinct", `{"member":"u1"}`, P, 404, false, false},
		{"distinct member as text", "POST", ctr + "/add-distinct", `{"member":"u1"}`, map[string]string{"X-API-Key": producer, "Content-Type": "text/plain"}, 415, true, false},
		{"eventual distinct member", "POST", "/v1/namespaces/contract-ev/counters/c1/add-distinct", `{"member":"u1"}`, P, 202, false, false},
		{"distinct count", "GET", ctr + "/distinct", "", A, 200, false, false},
		{"distinct count of a bad range", "GET", ctr + "/distinct?from=2026-01-01T00:00:00Z&to=2025-01-01T00:00:00Z", "", A, 400, false, false},
		{"distinct count of an unknown namespace", "GET", "/v1/namespaces/nope/counters/c1/distinct", "", A, 404, false, false},
		{"eventual series", "GET", "/v1/namespaces/contract-ev/counters/c1?granularity=hour", "", A, 200, false, false},
		{"add and get without a delta", "POST", ctr + "/add-and-get", `{}`, P, 400, true, false},
		{"add and get to an unknown namespace", "POST", "/v1/namespaces/nope/counters/c1/add-and-get", `{"delta":1}`, P, 404, false, false},
		{"add and get past the range", "POST", "/v1/namespaces/contract/counters/big/add-and-get", huge, P, 409, false, false},
		{"add and get as text", "POST", ctr + "/add-and-get", `{"delta":1}`, map[string]string{"X-API-Key": producer, "Content-Type": "text/plain"}, 415, true, false},
		{"count", "GET", ctr, "", A, 200, false, false},
		{"count with a time range", "GET", ctr + "?from=2026-12-01T00:00:00Z", "", A, 400, false, false},
		{"count of an unknown namespace", "GET", "/v1/namespaces/nope/counters/c1", "", A, 404, false, false},
		{"counts", "GET", "/v1/namespaces/contract/counters?names=c1,c2", "", A, 200, false, false},
		{"counts without names", "GET", "/v1/namespaces/contract/counters", "", A, 400, true, false},
		{"counts of an unknown namespace", "GET", "/v1/namespaces/nope/counters?names=c1", "", A, 404, false, false},
		{"clear", "POST", ctr + "/clear", `{"idempotency_token":"c1"}`, P, 200, false, false},
		{"clear with a bad token", "POST", ctr + "/clear", `{"idempotency_token":"a b"}`, P, 400, true, false},
		{"clear in an unknown namespace", "POST", "/v1/namespaces/nope/counters/c1/clear", `{}`, P, 404, false, false},
		{"clear as text", "POST", ctr + "/clear", `{}`, map[string]string{"X-API-Key": producer, "Content-Type": "text/plain"}, 415, true, false},
		{"namespace deleted", "DELETE", ns, "", AD, 204, false, false},
		{"namespace deleted again", "DELETE", ns, "", AD, 404, false, false},
		{"namespace of a bad name deleted", "DELETE", "/v1/namespaces/Bad", "", AD, 400, true, false},
	}
	publishTop(t, schemas.CountAds, "24h")
	answered := map[string]map[string]bool{} // "METHOD path-template" -> statuses answered
	saw := func(method string, route *routers.Route, code int) {
		if route == nil {
			return
		}
		op := method + " " + route.Path
		if answered[op] == nil {
			answered[op] = map[string]bool{}
		}
		answered[op][fmt.Sprint(code)] = true
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send := http.DefaultClient.Do
			if tt.slow {
				send = sendSlowly
			}
			code, route := check(t, router, api, tt.method, tt.path, tt.body, tt.header, tt.badRequest, send)
			if code != tt.want {
				t.Errorf("status: got %d; want %d", code, tt.want)
			}
			saw(tt.method, route, code)
		})
	}
	t.Run("ingest over capacity", func(t *testing.T) {
		// One body may be read at a time: hold one open, the next request is refused at once.
		hold := holdBody(t, strings.TrimPrefix(api, "http://"), producer)
		defer hold.Close()
		code, route := check(t, router, api, "POST", "/v1/views", view, P, false, http.DefaultClient.Do)
		if code != 503 {
			t.Errorf("status: got %d; want 503", code)
		}
		saw("POST", route, code)
	})
	for _, tt := range []struct {
		name, method, path string
		body               string
		want               int
		wantReady          string // /readyz's status after the request
	}{
		{"mint without a signing key", "POST", "/v1/ads/contract-ad/click-ids", "", 409, "degraded"},
		{"counts without redis", "GET", "/v1/counts?ids=contract-item", "", 503, "degraded"},
		{"like without redis", "PUT", "/v1/items/contract-item/likes/u42", "", 503, "degraded"},
		{"ingest without redis", "POST", "/v1/views", view, 202, "degraded"},
		{"not ready without kafka", "GET", "/readyz", "", 503, "not ready"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantReady == "not ready" {
				ownKafka.Close()
			}
			code, route := check(t, router, broken, tt.method, tt.path, tt.body, nil, false, http.DefaultClient.Do)
			if code != tt.want {
				t.Errorf("status: got %d; want %d", code, tt.want)
			}
			saw(tt.method, route, code)
			if got := readyStatus(t, broken); got != tt.wantReady {
				t.Errorf("/readyz: got %q; want %q", got, tt.wantReady)
			}
		})
	}
	t.Run("every documented status answered", func(t *testing.T) {
		// A status of the operation's own is answered by that operation; a shared one (a
		// components/responses reference, one schema for every route) by at least one.
		shared := map[string]bool{}
		for _, statuses := range answered {
			for code := range statuses {
				shared[code] = true
			}
		}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				for code, resp := range op.Responses.Map() {
					switch {
					case resp.Ref != "" && !shared[code]:
						t.Errorf("%s %s: no request in this test got its shared %s (%s)", method, path, code, resp.Ref)
					case resp.Ref == "" && !answered[method+" "+path][code]:
						t.Errorf("%s %s: no request in this test got its %s", method, path, code)
					}
				}
			}
		}
	})
	t.Run("every route documented", func(t *testing.T) {
		for _, rt := range auth.CollectorRoutes() {
			method, path, _ := strings.Cut(rt.Pattern, " ")
			if path == "/{$}" {
				path = "/"
			}
			if path == "/ui/{file}" {
				continue // the page's assets, served for the page only
			}
			item := doc.Paths.Find(path)
			if item == nil || item.GetOperation(method) == nil {
				t.Errorf("route %s is served but not in openapi.json", rt.Pattern)
			}
		}
	})
}

// check sends one request, validates it (unless it is meant to be bad) and its answer against
// the document, and returns the status and the document's route.
func check(t *testing.T, router routers.Router, api, method, path, body string, header map[string]string, badRequest bool,
	send func(*http.Request) (*http.Response, error)) (int, *routers.Route) {
	t.Helper()
	ctx := context.Background()
	build := func() *http.Request {
		req, err := http.NewRequestWithContext(ctx, method, api+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		switch {
		case req.Header.Get("Content-Type") != "":
		case path == "/v1/events":
			req.Header.Set("Content-Type", "application/x-ndjson")
		case body != "":
			req.Header.Set("Content-Type", "application/json")
		}
		return req
	}
	vreq := build()
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		t.Errorf("%s %s: not in the document: %v", method, path, err)
		return 0, nil
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && !badRequest {
		t.Errorf("request does not match the document: %v", err)
	} else if err == nil && badRequest {
		t.Errorf("request meant to break the document passes it; the document is too loose")
	}
	resp, err := send(build())
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(data)), Options: opts}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("answer %d %s does not match the document: %v", resp.StatusCode, bytes.TrimSpace(data[:min(len(data), 300)]), err)
	}
	return resp.StatusCode, route
}

// sendSlowly sends req's header and all but the end of its body, then waits for the answer:
// the collector's read_timeout cuts the body off (408).
func sendSlowly(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	c, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", req.Method, req.URL.RequestURI(), req.URL.Host, len(body)+100)
	if err := req.Header.Write(c); err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "\r\n%s", body); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body) // before the connection closes
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp, err
}

// holdBody opens a view request whose body is still arriving, holding the collector's one
// ingest slot until closed.
func holdBody(t *testing.T, addr, key string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/views HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"item_id\":", addr, key)
	time.Sleep(300 * time.Millisecond) // the handler has taken the slot and waits for the body
	return c
}

// publishTop writes a list of kind and window to Redis as topk does, and removes the list
// of items over 1m, so that both answers of GET /v1/top can be checked.
func publishTop(t *testing.T, kind schemas.CountKind, window string) {
	t.Helper()
	bound := uint64(3)
	b, err := json.Marshal(schemas.TopList{Kind: kind.String(), Window: window, ComputedAt: time.Now().UTC(), From: time.Now().UTC().Add(-24 * time.Hour),
		To: time.Now().UTC(), ErrorBound: &bound, Entries: []schemas.TopEntry{{Rank: 1, Key: "ad-1", Count: 9}, {Rank: 2, Key: "ad-2", Count: 4}, {Rank: 3, Key: "ad-3", Count: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, schemas.TopRedisKey(kind, window), b, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, schemas.TopRedisKey(schemas.CountItems, "1m")).Err(); err != nil {
		t.Fatal(err)
	}
}

// readyStatus is the status /readyz of the collector at api answers.
func readyStatus(t *testing.T, api string) string {
	t.Helper()
	resp, err := http.Get(api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decode /readyz: %v", err)
	}
	return body.Status
}
