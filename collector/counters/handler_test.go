package counters

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

// Every test's API keys: admin, a writer and a reader (both with both scopes, so that the
// namespaces' own lists decide).
var keys = map[string][]string{"admin": {"admin"}, "svc-w": {"ingest", "read"}, "svc-r": {"ingest", "read"}}

// server is one collector's counter routes behind the API keys' guard, over a migrated database
// and the test Redis.
type server struct {
	*httptest.Server
	reg *counters.Registry
	rdb *redis.Client
}

func openDB(t *testing.T, ctx context.Context, db string) driver.Conn {
	t.Helper()
	conn := infra.DB(t, ctx, db)
	if _, err := migrate.ApplyTo(ctx, conn, infra.Logger, migrate.Target{}); err != nil {
		t.Fatal(err)
	}
	return conn
}

func serve(t *testing.T, conn driver.Conn) *server {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	reg := counters.NewRegistry(counters.Store{Conn: conn}, time.Now, infra.Logger)
	if err := reg.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	New(Options{Namespaces: reg, BestEffort: counters.NewBestEffort(rdb), Producer: infra.Producer(t, schemas.TopicCounterEvents, 2), ProduceTimeout: 10 * time.Second,
		ClickHouse: conn, Now: time.Now, Logger: infra.Logger}).Register(api.NewRouter(mux, prometheus.NewRegistry()))
	var ks []collectorconf.APIKey
	for id, scopes := range keys {
		sum := sha256.Sum256([]byte("secret-" + id))
		ks = append(ks, collectorconf.APIKey{ID: id, SHA256: hex.EncodeToString(sum[:]), Scopes: scopes, Rate: 1e6, Burst: 1e6})
	}
	g, err := auth.New(auth.Options{Keys: ks})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Wrap(mux, auth.CollectorRoutes()))
	t.Cleanup(func() { srv.Client().CloseIdleConnections(); srv.Close() })
	return &server{Server: srv, reg: reg, rdb: rdb}
}

// call sends a request as key and returns the status and the body.
func (s *server) call(t *testing.T, key, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(auth.KeyHeader, "secret-"+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// must is call that fails t unless the status is want, decoding the answer into out when set.
func (s *server) must(t *testing.T, want int, key, method, path, body string, out any) {
	t.Helper()
	code, b := s.call(t, key, method, path, body)
	if code != want {
		t.Fatalf("%s %s: got %d %s; want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(b), out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
}

func (s *server) count(t *testing.T, ns, name string) int64 {
	t.Helper()
	var c Count
	s.must(t, http.StatusOK, "svc-r", "GET", "/v1/namespaces/"+ns+"/counters/"+name, "", &c)
	return c.Count
}

// A namespace is created, changed (its counts kept), read and deleted; a namespace created again
// under the name starts from zero.
func TestNamespaceLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := serve(t, openDB(t, ctx, "counters_lifecycle_test"))
	var v counters.View
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/shares", `{"mode":"best_effort","idempotency_window":"1h"}`, &v)
	if v.Mode != counters.ModeBestEffort || v.IdempotencyWindow != "1h0m0s" || v.Retention != "90d" {
		t.Errorf("got %+v; want best_effort, window 1h, retention 90d", v)
	}
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/shares/counters/post-1/add", `{"delta":3}`, nil)
	s.must(t, http.StatusOK, "admin", "PUT", "/v1/namespaces/shares", `{"mode":"best_effort","retention":"30d"}`, &v)
	if got := s.count(t, "shares", "post-1"); got != 3 {
		t.Errorf("got count %d after a settings change; want 3", got)
	}
	s.must(t, http.StatusOK, "admin", "GET", "/v1/namespaces/shares", "", &v)
	if v.Retention != "30d" || v.IdempotencyWindow != "1d" {
		t.Errorf("got %+v; want retention 30d and the default window 1d", v)
	}
	s.must(t, http.StatusNoContent, "admin", "DELETE", "/v1/namespaces/shares", "", nil)
	for _, c := range []struct{ key, method, path, body string }{
		{"admin", "GET", "/v1/namespaces/shares", ""},
		{"admin", "DELETE", "/v1/namespaces/shares", ""},
		{"svc-w", "POST", "/v1/namespaces/shares/counters/post-1/add", `{"delta":1}`},
		{"svc-r", "GET", "/v1/namespaces/shares/counters/post-1", ""},
	} {
		if code, b := s.call(t, c.key, c.method, c.path, c.body); code != http.StatusNotFound {
			t.Errorf("%s %s after the delete: got %d %s; want 404", c.method, c.path, code, b)
		}
	}
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/shares", `{"mode":"best_effort"}`, nil)
	if got := s.count(t, "shares", "post-1"); got != 0 {
		t.Errorf("got count %d in the namespace created again; want 0", got)
	}
}

// Adds, reads and clears: a token repeated within the window counts once, every add of many
// concurrent writers counts, and a token past the window is forgotten.
func TestAddsAreCountedOncePerToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := serve(t, openDB(t, ctx, "counters_adds_test"))
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/reactions", `{"mode":"best_effort"}`, nil)
	var r Result
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/heart/add-and-get", `{"delta":5,"idempotency_token":"t1"}`, &r)
	if r.Count == nil || *r.Count != 5 || r.Duplicate {
		t.Errorf("got %+v; want count 5, not a duplicate", r)
	}
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/heart/add-and-get", `{"delta":5,"idempotency_token":"t1"}`, &r)
	if r.Count == nil || *r.Count != 5 || !r.Duplicate {
		t.Errorf("got %+v for the retried token; want count 5, a duplicate", r)
	}
	r = Result{}
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/heart/add", `{"delta":-2,"event_time":"2026-12-04T10:00:00Z"}`, &r)
	if r.Count != nil || r.Duplicate {
		t.Errorf("got %+v from add; want no count, not a duplicate", r)
	}
	// 8 writers, 250 adds each, every one sent twice with its token.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 250 {
				body := fmt.Sprintf(`{"delta":1,"idempotency_token":"w%d-%d"}`, w, i)
				for range 2 {
					if code, b := s.call(t, "svc-w", "POST", "/v1/namespaces/reactions/counters/laugh/add", body); code != http.StatusOK {
						t.Errorf("add: got %d %s; want 200", code, b)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	var cs Counts
	s.must(t, http.StatusOK, "svc-r", "GET", "/v1/namespaces/reactions/counters?names=heart,laugh,never", "", &cs)
	want := []Count{{"reactions", "heart", 3}, {"reactions", "laugh", 2000}, {"reactions", "never", 0}}
	if fmt.Sprint(cs.Counts) != fmt.Sprint(want) {
		t.Errorf("got %v; want %v", cs.Counts, want)
	}
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/laugh/clear", `{"idempotency_token":"c1"}`, &r)
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/laugh/add", `{"delta":1}`, nil)
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/laugh/clear", `{"idempotency_token":"c1"}`, &r)
	if got := s.count(t, "reactions", "laugh"); got != 1 || !r.Duplicate {
		t.Errorf("got count %d, repeated clear duplicate=%v; want 1 (the add after the clear), true", got, r.Duplicate)
	}

	// The API allows windows of a minute and more; the store takes any, so a short one shows
	// that a token is forgotten once its window has passed.
	ns, _, err := s.reg.Lookup(ctx, "reactions")
	if err != nil {
		t.Fatal(err)
	}
	ns.IdempotencyWindow = 300 * time.Millisecond
	if _, _, err := s.reg.Put(ctx, ns); err != nil {
		t.Fatal(err)
	}
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/wave/add", `{"delta":1,"idempotency_token":"late"}`, nil)
	time.Sleep(400 * time.Millisecond)
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/reactions/counters/wave/add", `{"delta":1,"idempotency_token":"late"}`, nil)
	if got := s.count(t, "reactions", "wave"); got != 2 {
		t.Errorf("got count %d; want 2 (the token forgotten past its window)", got)
	}
}

// A live token costs one Redis key; its size is what docs/API.md states.
func TestTokenMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := serve(t, openDB(t, ctx, "counters_token_memory_test"))
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/meter", `{"mode":"best_effort"}`, nil)
	before, err := s.rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	token := "0123456789abcdef0123456789abcdef" // a 32-character token, as the Go client makes
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/meter/counters/api-calls/add", `{"delta":1,"idempotency_token":"`+token+`"}`, nil)
	after, err := s.rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 2 {
		t.Fatalf("got %d new keys for a first add with a token; want 2 (the count and the token)", after-before)
	}
	ns, _, _ := s.reg.Lookup(ctx, "meter")
	used, err := s.rdb.MemoryUsage(ctx, tokenKeyOf(ns, "api-calls", token)).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a live 32-character token costs %d bytes of Redis memory", used)
	if used <= 0 || used > 160 {
		t.Errorf("got %d bytes for a live token; want at most 160 (docs/API.md)", used)
	}
}

// tokenKeyOf finds the token key the add wrote.
func tokenKeyOf(ns counters.Namespace, name, token string) string {
	return fmt.Sprintf("tally:ctr:{%s@%s/%s}:t:%s", ns.Name, strconv.FormatUint(ns.Generation, 36), name, token)
}

// Namespaces list the keys that may write and read them; a collector that did not make a change
// sees it as soon as it is asked for the namespace, or within a refresh.
func TestAccessAndOtherCollectors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openDB(t, ctx, "counters_access_test")
	a, b := serve(t, conn), serve(t, conn)
	a.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/billing", `{"mode":"best_effort","writers":["svc-w"],"readers":["svc-r"]}`, nil)
	// b read the namespaces just before: it reads them again for an unknown one at most every
	// 200 ms.
	testinfra.WaitFor(t, time.Second, "the other collector to find the new namespace", func() (bool, string) {
		code, body := b.call(t, "admin", "GET", "/v1/namespaces/billing", "")
		return code == http.StatusOK, fmt.Sprintf("got %d %s", code, body)
	})
	for _, c := range []struct {
		key, method, path, body string
		want                    int
	}{
		{"svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":1}`, http.StatusOK},
		{"svc-r", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":1}`, http.StatusForbidden},
		{"svc-r", "GET", "/v1/namespaces/billing/counters/calls", "", http.StatusOK},
		{"svc-w", "GET", "/v1/namespaces/billing/counters/calls", "", http.StatusForbidden},
		{"svc-w", "PUT", "/v1/namespaces/billing", `{"mode":"best_effort"}`, http.StatusForbidden},
		{"svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":1,"idempotency_token":"a b"}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"idempotency_token":"x"}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":1.5}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":1,"event_time":"yesterday"}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/billing/counters/a%20b/add", `{"delta":1}`, http.StatusBadRequest},
		{"svc-r", "GET", "/v1/namespaces/billing/counters/calls?from=2026-12-01", "", http.StatusBadRequest},
		{"svc-r", "GET", "/v1/namespaces/billing/counters?names=" + strings.Repeat("n,", 100) + "n", "", http.StatusBadRequest},
		{"admin", "PUT", "/v1/namespaces/Billing", `{"mode":"best_effort"}`, http.StatusBadRequest},
	} {
		if code, body := b.call(t, c.key, c.method, c.path, c.body); code != c.want {
			t.Errorf("%s %s %s as %s on the other collector: got %d %s; want %d", c.method, c.path, c.body, c.key, code, body, c.want)
		}
	}
	a.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":9223372036854775000}`, nil)
	if code, body := a.call(t, "svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":9223372036854775000}`); code != http.StatusConflict {
		t.Errorf("an add past the 64-bit range: got %d %s; want 409", code, body)
	}
	req, _ := http.NewRequest("POST", a.URL+"/v1/namespaces/billing/counters/calls/add", bytes.NewReader([]byte(`{"delta":1}`)))
	req.Header.Set(auth.KeyHeader, "secret-svc-w")
	resp, err := a.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("an add without a JSON content type: got %d; want 415", resp.StatusCode)
	}
	a.must(t, http.StatusNoContent, "admin", "DELETE", "/v1/namespaces/billing", "", nil)
	rctx, stop := context.WithCancel(ctx)
	go b.reg.Run(rctx)
	defer stop()
	testinfra.WaitFor(t, 3*counters.RefreshEvery, "the other collector to stop writes to the deleted namespace", func() (bool, string) {
		code, body := b.call(t, "svc-w", "POST", "/v1/namespaces/billing/counters/calls/add", `{"delta":1}`)
		return code == http.StatusNotFound, fmt.Sprintf("got %d %s", code, body)
	})
}

// An eventual namespace's add or clear is a record of the counter_events topic, answered 202
// once Kafka has it: with the namespace's generation, window and retention, keyed by counter. Its reads sum
// the aggregators' rows of counter_deltas (markers aside); add-and-get adds this add to them.
func TestEventualAddsGoToTheLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openDB(t, ctx, "counters_eventual_test")
	s := serve(t, conn)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/plays", `{"mode":"eventual","idempotency_window":"2h","retention":"30d"}`, nil)
	ns, _, err := s.reg.Lookup(ctx, "plays")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/v1/namespaces/plays/counters/eu/add", `{"delta":1}`, http.StatusBadRequest}, // no token
		{"/v1/namespaces/plays/counters/eu/clear", `{}`, http.StatusBadRequest},        // no token
		{"/v1/namespaces/plays/counters/eu/add", `{"delta":4,"idempotency_token":"a1","event_time":"2026-12-04T10:00:00Z"}`, http.StatusAccepted},
		{"/v1/namespaces/plays/counters/eu/clear", `{"idempotency_token":"c1"}`, http.StatusAccepted},
	} {
		if code, body := s.call(t, "svc-w", "POST", c.path, c.body); code != c.want {
			t.Errorf("POST %s %s: got %d %s; want %d", c.path, c.body, code, body, c.want)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(infra.Kafka.Addr()), kgo.ConsumeTopics(schemas.TopicCounterEvents), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []schemas.CounterEvent
	for len(got) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			e, err := schemas.DecodeCounterEvent(r.Value)
			if err != nil {
				t.Errorf("record %q: %v", r.Value, err)
			}
			if e.Namespace == "plays" {
				if string(r.Key) != "plays/eu" {
					t.Errorf("got key %q; want plays/eu", r.Key)
				}
				got = append(got, e)
			}
		})
	}
	want := schemas.CounterEvent{Op: schemas.CounterAdd, Namespace: "plays", Generation: ns.Generation, Name: "eu", Delta: 4, Token: "a1",
		TS: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC).UnixMilli(), Window: 2 * 3600 * 1000, Retention: 30 * 86400}
	if len(got) != 2 || got[0] != want || got[1].Op != schemas.CounterClear || got[1].Token != "c1" || got[1].Name != "eu" {
		t.Errorf("got %+v in the log; want %+v, then a clear with token c1", got, want)
	}
	// Rows as the aggregators write them: two batches of eu, a marker, another generation.
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO counter_deltas (partition, epoch, end_offset, ns, generation, name, minute, delta, expires) VALUES
			(0, 1, 5, 'plays', %d, 'eu', now(), 4, now() + 3600), (0, 1, 9, 'plays', %d, 'eu', now(), -1, now() + 3600),
			(0, 1, 9, '', 0, '', now(), 0, now() + 3600), (0, 1, 9, 'plays', %d, 'eu', now(), 100, now() + 3600)`, ns.Generation, ns.Generation, ns.Generation+1),
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var cs Counts
	s.must(t, http.StatusOK, "svc-r", "GET", "/v1/namespaces/plays/counters?names=eu,us", "", &cs)
	if fmt.Sprint(cs.Counts) != fmt.Sprint([]Count{{"plays", "eu", 3}, {"plays", "us", 0}}) {
		t.Errorf("got %v; want eu 3, us 0", cs.Counts)
	}
	var r Result
	s.must(t, http.StatusAccepted, "svc-w", "POST", "/v1/namespaces/plays/counters/eu/add-and-get", `{"delta":2,"idempotency_token":"a2"}`, &r)
	if r.Count == nil || *r.Count != 5 {
		t.Errorf("got %+v from add-and-get; want count 5 (3 counted, plus this add)", r)
	}
}

// An eventual counter's series sums its minutes per bucket, zero-filled; best_effort namespaces
// keep no buckets.
func TestEventualSeries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openDB(t, ctx, "counters_series_test")
	s := serve(t, conn)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/plays", `{"mode":"eventual"}`, nil)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/quick", `{"mode":"best_effort"}`, nil)
	ns, _, err := s.reg.Lookup(ctx, "plays")
	if err != nil {
		t.Fatal(err)
	}
	day := testinfra.RecentNoon().Truncate(24 * time.Hour)
	at := func(h, m int) string {
		return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute).Format("2006-01-02 15:04:05")
	}
	if err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO counter_deltas (partition, epoch, end_offset, ns, generation, name, minute, delta, expires) VALUES
		(0, 1, 5, 'plays', %[1]d, 'eu', '%[2]s', 4, now() + 3600), (0, 1, 9, 'plays', %[1]d, 'eu', '%[2]s', -1, now() + 3600),
		(0, 1, 9, 'plays', %[1]d, 'eu', '%[3]s', 10, now() + 3600), (0, 1, 9, 'plays', %[1]d, 'eu', '%[4]s', 5, now() + 3600)`,
		ns.Generation, at(10, 5), at(10, 59), at(12, 0))); err != nil {
		t.Fatal(err)
	}
	from, to := day.Add(10*time.Hour).Format(time.RFC3339), day.Add(12*time.Hour+30*time.Minute).Format(time.RFC3339)
	var got Series
	s.must(t, http.StatusOK, "svc-r", "GET", "/v1/namespaces/plays/counters/eu?granularity=hour&from="+from+"&to="+to, "", &got)
	want := []int64{13, 0, 5}
	if len(got.Points) != len(want) {
		t.Fatalf("got %+v; want 3 hourly points", got)
	}
	for i, p := range got.Points {
		if p.Count != want[i] || !p.T.Equal(day.Add(time.Duration(10+i)*time.Hour)) {
			t.Errorf("point %d: got %+v; want %d at %s", i, p, want[i], day.Add(time.Duration(10+i)*time.Hour))
		}
	}
	for _, c := range []string{
		"/v1/namespaces/plays/counters/eu?granularity=second",
		"/v1/namespaces/quick/counters/eu?granularity=hour",
		"/v1/namespaces/plays/counters/eu?from=yesterday",
	} {
		if code, body := s.call(t, "svc-r", "GET", c, ""); code != http.StatusBadRequest {
			t.Errorf("GET %s: got %d %s; want 400", c, code, body)
		}
	}
}

// Distinct counts: best_effort in Redis's HyperLogLogs, eventual over the aggregators' hourly
// sketches (rows as the counters stream writes them). Over an hour and over a day, each estimate
// is within its stated error of the true number of members, and a member added twice counts
// once.
func TestDistinctCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openDB(t, ctx, "counters_distinct_test")
	s := serve(t, conn)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/quick", `{"mode":"best_effort"}`, nil)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/plays", `{"mode":"eventual"}`, nil)
	quick, _, _ := s.reg.Lookup(ctx, "quick")
	plays, _, _ := s.reg.Lookup(ctx, "plays")
	day := testinfra.RecentNoon().Truncate(24 * time.Hour)
	// 12,000 members in hour 10, 8,000 in hour 11 of which 3,000 were also in hour 10: 17,000 in
	// all; every member of hour 10 is also sent again.
	member := func(i int) string { return fmt.Sprintf("user-%d@example", i) }
	be := counters.NewBestEffort(s.rdb)
	rows, err := conn.PrepareBatch(ctx, "INSERT INTO counter_distinct_input (ns, generation, name, hour, member, expires)")
	if err != nil {
		t.Fatal(err)
	}
	add := func(hour, i int) {
		at := day.Add(time.Duration(hour)*time.Hour + time.Duration(i%3600)*time.Second)
		if err := be.AddDistinct(ctx, quick, "eu", member(i), at); err != nil {
			t.Fatal(err)
		}
		if err := rows.Append("plays", plays.Generation, "eu", day.Add(time.Duration(hour)*time.Hour), member(i), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12_000 {
		add(10, i)
		add(10, i)
	}
	for i := 9_000; i < 17_000; i++ {
		add(11, i)
	}
	if err := rows.Send(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns, from, to string
		want         float64
	}{
		{"quick", "T10:00:00Z", "T10:59:59Z", 12_000}, {"quick", "T00:00:00Z", "T23:59:59Z", 17_000},
		{"plays", "T10:00:00Z", "T10:59:59Z", 12_000}, {"plays", "T00:00:00Z", "T23:59:59Z", 17_000},
	} {
		var got DistinctCount
		d := day.Format("2006-01-02")
		s.must(t, http.StatusOK, "svc-r", "GET", "/v1/namespaces/"+c.ns+"/counters/eu/distinct?from="+d+c.from+"&to="+d+c.to, "", &got)
		rel := (float64(got.Distinct) - c.want) / c.want
		t.Logf("%s %s..%s: %d distinct of %.0f: relative error %+.4f (stated standard error %.4f)", c.ns, c.from, c.to, got.Distinct, c.want, rel, got.StdError)
		if rel > 2*got.StdError || rel < -2*got.StdError || got.StdError == 0 {
			t.Errorf("%s %s..%s: got %d distinct (std error %v); want %.0f within twice the stated error", c.ns, c.from, c.to, got.Distinct, got.StdError, c.want)
		}
	}
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/namespaces/quick/counters/eu/add-distinct", `{"member":"u-1"}`, http.StatusOK},
		{"POST", "/v1/namespaces/plays/counters/eu/add-distinct", `{"member":"u-1","event_time":"2026-12-04T10:00:00Z"}`, http.StatusAccepted},
		{"POST", "/v1/namespaces/plays/counters/eu/add-distinct", `{}`, http.StatusBadRequest},
		{"POST", "/v1/namespaces/plays/counters/eu/add-distinct", `{"member":"a b"}`, http.StatusBadRequest},
		{"GET", "/v1/namespaces/quick/counters/eu/distinct?from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z", "", http.StatusBadRequest},
		{"GET", "/v1/namespaces/plays/counters/eu/distinct?granularity=hour", "", http.StatusBadRequest},
		{"GET", "/v1/namespaces/plays/counters/eu/distinct", "", http.StatusOK},
		{"GET", "/v1/namespaces/nope/counters/eu/distinct", "", http.StatusNotFound},
	} {
		key := "svc-w"
		if c.method == "GET" {
			key = "svc-r"
		}
		if code, body := s.call(t, key, c.method, c.path, c.body); code != c.want {
			t.Errorf("%s %s %s: got %d %s; want %d", c.method, c.path, c.body, code, body, c.want)
		}
	}
}

// Inputs an attacker would try on the counter routes: names with encoded slashes, dots, Unicode
// spaces or look-alike letters, a body smuggling a second field or a huge number, the wrong
// method. Each is refused without touching a counter, and the counter reads what it did.
func TestCounterRoutesRefuseCraftedInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := serve(t, openDB(t, ctx, "counters_crafted_test"))
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/guard", `{"mode":"best_effort"}`, nil)
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/guard/counters/c/add", `{"delta":1}`, nil)
	for _, c := range []struct {
		key, method, path, body string
		want                    int
	}{
		{"svc-w", "POST", "/v1/namespaces/guard/counters/a%2Fc/add", `{"delta":1}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/guard/counters/c%E2%80%80/add", `{"delta":1}`, http.StatusBadRequest}, // en quad
		{"svc-w", "POST", "/v1/namespaces/guard/counters/%D1%81/add", `{"delta":1}`, http.StatusBadRequest},     // Cyrillic es
		{"svc-w", "POST", "/v1/namespaces/guard/counters/c}x/add", `{"delta":1}`, http.StatusBadRequest},        // a Redis hash tag
		{"svc-w", "POST", "/v1/namespaces/guard/counters/c/add", `{"delta":1,"delta":"9"}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/guard/counters/c/add", `{"delta":1e30}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/guard/counters/c/add", `{"delta":1,"idempotency_token":"t\u0000x"}`, http.StatusBadRequest},
		{"svc-w", "POST", "/v1/namespaces/guard/counters/c/add", `{"delta":1} {"delta":1000}`, http.StatusBadRequest},
		{"svc-w", "GET", "/v1/namespaces/guard/counters/c/add", "", http.StatusForbidden}, // no GET route: admin only
		{"admin", "GET", "/v1/namespaces/guard/counters/c/add", "", http.StatusMethodNotAllowed},
		{"admin", "PUT", "/v1/namespaces/guard%2Fx", `{"mode":"best_effort"}`, http.StatusBadRequest},
		{"admin", "PUT", "/v1/namespaces/GUARD", `{"mode":"best_effort"}`, http.StatusBadRequest},
		{"admin", "PUT", "/v1/namespaces/g%C3%BCard", `{"mode":"best_effort"}`, http.StatusBadRequest},
		{"svc-r", "GET", "/v1/namespaces/guard/counters?names=c,%20c", "", http.StatusBadRequest},
	} {
		if code, body := s.call(t, c.key, c.method, c.path, c.body); code != c.want {
			t.Errorf("%s %s %s: got %d %s; want %d", c.method, c.path, c.body, code, body, c.want)
		}
	}
	if got := s.count(t, "guard", "c"); got != 1 {
		t.Errorf("got count %d; want 1 (only the first add)", got)
	}
}

// An accurate counter reads its acknowledged adds at once: before any aggregator counted them,
// and after a flush of part of them (rows and checkpoint as the counters stream writes them)
// without counting those twice. A retried token counts once, whether its first copy is after
// the checkpoint or before it; a clear drops all before it; the series holds the same adds.
func TestAccurateReadsItsOwnAdds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openDB(t, ctx, "counters_accurate_test")
	s := serve(t, conn)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/tallies", `{"mode":"accurate","idempotency_window":"1h"}`, nil)
	if code, body := s.call(t, "svc-w", "POST", "/v1/namespaces/tallies/counters/x/add", `{"delta":1}`); code != http.StatusBadRequest {
		t.Errorf("add without a token: got %d %s; want 400", code, body)
	}
	add := func(token string, delta int64, want int64) {
		t.Helper()
		var r Result
		s.must(t, http.StatusAccepted, "svc-w", "POST", "/v1/namespaces/tallies/counters/x/add-and-get",
			fmt.Sprintf(`{"delta":%d,"idempotency_token":%q}`, delta, token), &r)
		if r.Count == nil || *r.Count != want {
			t.Fatalf("add %s %d: got %+v; want count %d", token, delta, r, want)
		}
	}
	add("a1", 5, 5)
	add("a2", 3, 8)
	add("a1", 5, 8) // a retry after the checkpoint: the tail counts it once
	// An aggregator counts the first three records: one row of 8, the checkpoint after them.
	recs := logged(t, ctx, "tallies/x", 3)
	ns, _, err := s.reg.Lookup(ctx, "tallies")
	if err != nil {
		t.Fatal(err)
	}
	p, end := recs[2].Partition, recs[2].Offset+1
	if err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO counter_deltas (partition, epoch, end_offset, ns, generation, name, minute, delta, expires) VALUES
		(%[1]d, 1, %[2]d, 'tallies', %[3]d, 'x', toStartOfMinute(now()), 8, now() + 3600), (%[1]d, 1, %[2]d, '', 0, '', toStartOfMinute(now()), 0, now() + 3600)`,
		p, end, ns.Generation)); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[:2] {
		ev, err := schemas.DecodeCounterEvent(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Exec(ctx, `INSERT INTO counter_tokens (partition, epoch, end_offset, window_ms, key, ts) VALUES (?, 1, ?, ?, ?, fromUnixTimestamp64Milli(?))`,
			uint16(p), end, ev.Window, ev.DedupeKey(), ev.TS); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.count(t, "tallies", "x"); got != 8 {
		t.Errorf("after the flush: got %d; want 8 (counted once, not again from the log)", got)
	}
	add("a3", 2, 10)
	add("a1", 5, 10) // a retry of a token counted before the checkpoint
	s.must(t, http.StatusAccepted, "svc-w", "POST", "/v1/namespaces/tallies/counters/x/clear", `{"idempotency_token":"c1"}`, nil)
	add("a4", 7, 7)
	var cs Counts
	s.must(t, http.StatusOK, "svc-r", "GET", "/v1/namespaces/tallies/counters?names=x,y", "", &cs)
	if fmt.Sprint(cs.Counts) != fmt.Sprint([]Count{{"tallies", "x", 7}, {"tallies", "y", 0}}) {
		t.Errorf("got %v; want x 7, y 0", cs.Counts)
	}
	var series Series
	s.must(t, http.StatusOK, "svc-r", "GET", "/v1/namespaces/tallies/counters/x?granularity=minute&from="+
		strconv.FormatInt(time.Now().Add(-5*time.Minute).UnixMilli(), 10), "", &series)
	var sum int64
	for _, pt := range series.Points {
		sum += pt.Count
	}
	if sum != 7 {
		t.Errorf("got a series summing to %d (%+v); want 7", sum, series.Points)
	}
	// A tail longer than one token lookup takes (tokenChunk keys): each add counted once.
	for b := range 6 {
		adds := make([]string, 1000)
		for i := range adds {
			adds[i] = fmt.Sprintf(`{"name":"x","delta":1,"idempotency_token":"bulk-%d-%d"}`, b, i)
		}
		s.must(t, http.StatusAccepted, "svc-w", "POST", "/v1/namespaces/tallies/adds", `{"adds":[`+strings.Join(adds, ",")+`]}`, nil)
	}
	if got := s.count(t, "tallies", "x"); got != 6007 {
		t.Errorf("after 6,000 more adds: got %d; want 6007", got)
	}
}

// logged reads the first n records of key from the counter_events topic.
func logged(t *testing.T, ctx context.Context, key string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(infra.Kafka.Addr()), kgo.ConsumeTopics(schemas.TopicCounterEvents), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if string(r.Key) == key {
				out = append(out, r)
			}
		})
	}
	if len(out) < n {
		t.Fatalf("got %d records of %s in the log; want %d", len(out), key, n)
	}
	return out[:n]
}

// A batch of adds is checked whole, then applied: best_effort in one Redis pipeline (a repeated
// token counts once, an overflowing add alone is refused), accurate (a logged mode) in the log at
// once, read back exactly at once.
func TestBatchOfAdds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openDB(t, ctx, "counters_batch_test")
	s := serve(t, conn)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/quick", `{"mode":"best_effort"}`, nil)
	s.must(t, http.StatusCreated, "admin", "PUT", "/v1/namespaces/sure", `{"mode":"accurate"}`, nil)
	var got BatchResult
	s.must(t, http.StatusOK, "svc-w", "POST", "/v1/namespaces/quick/adds",
		`{"adds":[{"name":"a","delta":2,"idempotency_token":"t1"},{"name":"b","delta":-1},{"name":"a","delta":2,"idempotency_token":"t1"},{"name":"a","delta":5}]}`, &got)
	if got != (BatchResult{Added: 3, Duplicates: 1}) || s.count(t, "quick", "a") != 7 || s.count(t, "quick", "b") != -1 {
		t.Errorf("got %+v, a %d, b %d; want 3 added, 1 duplicate, a 7, b -1", got, s.count(t, "quick", "a"), s.count(t, "quick", "b"))
	}
	code, body := s.call(t, "svc-w", "POST", "/v1/namespaces/quick/adds",
		`{"adds":[{"name":"b","delta":1},{"name":"a","delta":9223372036854775807}]}`)
	if code != http.StatusConflict || !strings.Contains(body, `adds[1].delta`) || s.count(t, "quick", "b") != 0 {
		t.Errorf("an overflowing add: got %d %s, b %d; want 409 naming adds[1].delta, b 0 (the other add applied)", code, body, s.count(t, "quick", "b"))
	}
	var adds []string
	want := int64(0)
	for i := range 300 {
		adds = append(adds, fmt.Sprintf(`{"name":"c%d","delta":%d,"idempotency_token":"k%d"}`, i%3, i, i))
		if i%3 == 0 {
			want += int64(i)
		}
	}
	s.must(t, http.StatusAccepted, "svc-w", "POST", "/v1/namespaces/sure/adds", `{"adds":[`+strings.Join(adds, ",")+`]}`, &got)
	if got.Added != 300 || s.count(t, "sure", "c0") != want {
		t.Errorf("got %+v, c0 %d; want 300 added, c0 %d", got, s.count(t, "sure", "c0"), want)
	}
	for _, c := range []struct{ ns, body, field string }{
		{"quick", `{"adds":[]}`, "adds"},
		{"quick", `{"adds":[{"name":"a","delta":1}` + strings.Repeat(`,{"name":"a","delta":1}`, 1000) + `]}`, "adds"},
		{"quick", `{"adds":[{"name":"a","delta":1},{"name":"a b","delta":1}]}`, "adds[1].name"},
		{"quick", `{"adds":[{"name":"a"}]}`, "adds[0].delta"},
		{"sure", `{"adds":[{"name":"a","delta":1}]}`, "adds[0].idempotency_token"},
		{"quick", `{"adds":[{"name":"a","delta":1}]} {}`, "body"},
	} {
		code, body := s.call(t, "svc-w", "POST", "/v1/namespaces/"+c.ns+"/adds", c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, `"field":"`+c.field+`"`) {
			t.Errorf("%.60s: got %d %s; want 400 naming %s", c.body, code, body, c.field)
		}
	}
}
