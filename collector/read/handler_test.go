package read

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/axiomhq/hyperloglog"
	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/schemas/viewerhours"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process).
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

// fresh gives the test an empty, migrated database and an empty Redis: the tests reuse item
// ids, and go test -count runs them again in this process.
func fresh(t *testing.T) (driver.Conn, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	conn := infra.DB(t, ctx, "readtest")
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return conn, rdb
}

// clock is an injected clock, stopped at t.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// addViews writes what the aggregator would: deltas for item at ts, and the same views into
// every rollup.
func addViews(t *testing.T, conn driver.Conn, item string, ts time.Time, n uint64) {
	t.Helper()
	for _, q := range []string{
		"INSERT INTO view_deltas (partition, end_offset, watermark, item_id, second, views) VALUES (0, 1, now64(), ?, ?, ?)",
		"INSERT INTO views_by_minute (item_id, minute, views) VALUES (?, toStartOfMinute(toDateTime(?)), ?)",
		"INSERT INTO views_by_hour (item_id, hour, views) VALUES (?, toStartOfHour(toDateTime(?)), ?)",
		"INSERT INTO views_total_by_day (item_id, day, views) VALUES (?, toDate(toDateTime(?)), ?)",
	} {
		if err := conn.Exec(context.Background(), q, item, ts.UTC(), n); err != nil {
			t.Fatal(err)
		}
	}
}

// newTestHandler serves a handler on a fresh database and Redis, and returns the database.
func newTestHandler(t *testing.T, c *clock) (driver.Conn, *httptest.Server) {
	t.Helper()
	conn, rdb := fresh(t)
	srv := startHandler(t, New(Options{ClickHouse: conn, Redis: rdb, Now: c.now, Logger: infra.Logger, Registry: prometheus.NewRegistry()}))
	return conn, srv
}

// startHandler serves h until t ends.
func startHandler(t *testing.T, h *Handler) *httptest.Server {
	mux := http.NewServeMux()
	h.Register(api.NewRouter(mux, prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// setTotals writes what the aggregator keeps in Redis after its flushes: totals and estimates
// of partition 0's items, a guard for each of the partitions, and the ready marker.
func setTotals(t *testing.T, rdb *redis.Client, views map[string]int64, unique map[string]uint64) {
	t.Helper()
	ctx := context.Background()
	s := totals.New(rdb, TotalsName)
	const partitions = 2
	for p := range int32(partitions) {
		vals := views
		if p > 0 {
			vals = nil
		}
		if err := s.Set(ctx, p, totals.Guard{Epoch: 1, End: 10, Chunk: totals.AllChunks}, vals); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetUnique(ctx, unique); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.MarkReadyIfComplete(ctx, partitions); !ok || err != nil {
		t.Fatalf("mark ready: got %v, %v; want true, nil", ok, err)
	}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode %s: %v", url, err)
	}
	return resp.StatusCode
}

// Counts are the Redis totals, not ClickHouse's: here the two differ on purpose.
func TestCounts(t *testing.T) {
	ctx := context.Background()
	conn, rdb := fresh(t)
	reg := prometheus.NewRegistry()
	srv := startHandler(t, New(Options{ClickHouse: conn, Redis: rdb, Logger: infra.Logger, Registry: reg}))
	addViews(t, conn, "c-a", time.Now().Add(-time.Hour), 1000)
	setTotals(t, rdb, map[string]int64{"c-a": 7, "c-b": 1}, map[string]uint64{"c-a": 6})
	keys := rdb.DBSize(ctx).Val()
	var one ItemCounts
	if code := getJSON(t, srv.URL+"/v1/items/c-a/counts", &one); code != 200 || one != (ItemCounts{ItemID: "c-a", Views: 7, UniqueViewers: 6}) {
		t.Errorf("got %d %+v; want 200 c-a 7 views 6 unique", code, one)
	}
	var batch struct{ Items []ItemCounts }
	if code := getJSON(t, srv.URL+"/v1/counts?ids=c-b,unknown,c-a,c-b,other-unknown", &batch); code != 200 {
		t.Fatalf("got %d; want 200", code)
	}
	want := []ItemCounts{{ItemID: "c-b", Views: 1}, {ItemID: "unknown"}, {ItemID: "c-a", Views: 7, UniqueViewers: 6}, {ItemID: "c-b", Views: 1}, {ItemID: "other-unknown"}}
	if fmt.Sprint(batch.Items) != fmt.Sprint(want) {
		t.Errorf("got %+v; want %+v (request order, unknown as zeros)", batch.Items, want)
	}
	if n := redisReads(t, reg); n != 2 {
		t.Errorf("tally_read_redis_seconds: got %d round trips; want 2 (one per request)", n)
	}
	if n := fallbacks(t, reg, "served"); n != 0 {
		t.Errorf("ClickHouse reads: got %v; want 0", n)
	}
	if n := rdb.DBSize(ctx).Val(); n != keys {
		t.Errorf("Redis keys after reading unknown ids: got %d; want %d as before", n, keys)
	}
}

// Without the ready marker (Redis empty or being rebuilt), a page's counts come from ClickHouse
// in one query, and reading creates nothing in Redis.
func TestCountsFallBackToClickHouse(t *testing.T) {
	ctx := context.Background()
	conn, rdb := fresh(t)
	reg := prometheus.NewRegistry()
	srv := startHandler(t, New(Options{ClickHouse: conn, Redis: rdb, Logger: infra.Logger, Registry: reg}))
	ts := time.Now().Add(-time.Hour)
	addViews(t, conn, "f-a", ts, 5)
	addViews(t, conn, "f-a", ts.Add(time.Minute), 2)
	addViews(t, conn, "f-b", ts, 1)
	if err := conn.Exec(ctx, "INSERT INTO unique_viewers (item_id, day, sketch, viewers, updated_at) VALUES ('f-a', toDate(0), '', 6, now64())"); err != nil {
		t.Fatal(err)
	}
	// A partial state, as during a rebuild: some totals written, no marker.
	if err := totals.New(rdb, TotalsName).Set(ctx, 0, totals.Guard{Epoch: 1, End: 3}, map[string]int64{"f-a": 2}); err != nil {
		t.Fatal(err)
	}
	keys := rdb.DBSize(ctx).Val()
	var batch struct{ Items []ItemCounts }
	if code := getJSON(t, srv.URL+"/v1/counts?ids=f-b,unknown,f-a", &batch); code != 200 {
		t.Fatalf("got %d; want 200", code)
	}
	want := []ItemCounts{{ItemID: "f-b", Views: 1}, {ItemID: "unknown"}, {ItemID: "f-a", Views: 7, UniqueViewers: 6}}
	if fmt.Sprint(batch.Items) != fmt.Sprint(want) {
		t.Errorf("got %+v; want %+v", batch.Items, want)
	}
	if n := fallbacks(t, reg, "served"); n != 1 {
		t.Errorf("ClickHouse reads: got %v; want 1", n)
	}
	if n := rdb.DBSize(ctx).Val(); n != keys {
		t.Errorf("Redis keys after a fallback read: got %d; want %d as before", n, keys)
	}
}

// Beyond FallbackReads ClickHouse reads in flight, a page waits FallbackTimeout and then answers
// 503 with Retry-After; once a slot frees, pages are served again.
func TestFallbackBound(t *testing.T) {
	conn, rdb := fresh(t)
	reg := prometheus.NewRegistry()
	// The bound covers the read itself too: long enough for the read on a loaded machine.
	h := New(Options{ClickHouse: conn, Redis: rdb, Logger: infra.Logger, Registry: reg, FallbackReads: 2, FallbackTimeout: time.Second})
	srv := startHandler(t, h)
	// Two reads in flight hold both slots.
	h.fallback <- struct{}{}
	h.fallback <- struct{}{}
	resp, err := http.Get(srv.URL + "/v1/counts?ids=a,b")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("with both slots taken: got %d (Retry-After %q); want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := fallbacks(t, reg, "refused"); n != 1 {
		t.Errorf("refused: got %v; want 1", n)
	}
	<-h.fallback
	var batch struct{ Items []ItemCounts }
	if code := getJSON(t, srv.URL+"/v1/counts?ids=a,b", &batch); code != 200 {
		t.Errorf("with a slot free: got %d; want 200", code)
	}
}

// A page whose ClickHouse read is slow answers 503 with Retry-After at the default bound of
// 1 s, and ClickHouse stops the query then too: the engine is free again long before the query
// would have ended.
func TestSlowFallbackIs503WithinASecond(t *testing.T) {
	ctx := context.Background()
	conn, rdb := fresh(t)
	// views_total made slow: 2.9 s of sleep for every read of slow-item (just under the
	// engine's 3 s cap on one block's sleep).
	for _, q := range []string{
		"DROP VIEW views_total",
		"CREATE VIEW views_total AS SELECT 'slow-item' AS item_id, toUInt64(1) AS views FROM numbers(29) WHERE sleepEachRow(0.1) = 0",
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	srv := startHandler(t, New(Options{ClickHouse: conn, Redis: rdb, Logger: infra.Logger, Registry: reg}))
	t0 := time.Now()
	resp, err := http.Get(srv.URL + "/v1/counts?ids=slow-item")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	answered := time.Since(t0)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || answered > 1500*time.Millisecond {
		t.Errorf("got %d (Retry-After %q) %s after %s; want 503 with Retry-After within about 1s", resp.StatusCode, resp.Header.Get("Retry-After"), b, answered)
	}
	if n := fallbacks(t, reg, "timed_out"); n != 1 {
		t.Errorf("timed out: got %v; want 1", n)
	}
	// The engine runs one query at a time: the next one waits for the slow one to stop.
	var one uint8
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if free := time.Since(t0); free > 2*time.Second {
		t.Errorf("engine free again after %s; want well before the 2.9s the query would take (max_execution_time)", free)
	}
}

// Pages waiting for a slot at the same time share one ClickHouse query.
func TestFallbackBatchesWaitingPages(t *testing.T) {
	conn, rdb := fresh(t)
	addViews(t, conn, "b-3", time.Now().Add(-time.Hour), 3)
	counting := &countingConn{Conn: conn}
	reg := prometheus.NewRegistry()
	h := New(Options{ClickHouse: counting, Redis: rdb, Logger: infra.Logger, Registry: reg, FallbackReads: 1, FallbackTimeout: 10 * time.Second})
	srv := startHandler(t, h)
	h.fallback <- struct{}{} // a read in flight holds the only slot
	const pages = 5
	var wg sync.WaitGroup
	got := make([]struct{ Items []ItemCounts }, pages)
	codes := make([]int, pages)
	for i := range pages {
		wg.Go(func() { codes[i] = getJSON(t, fmt.Sprintf("%s/v1/counts?ids=b-%d,b-3", srv.URL, i), &got[i]) })
	}
	// Every page has joined the waiting batch once its leader counts as waiting and the others
	// have added their ids; then the slot frees.
	testinfra.WaitFor(t, 10*time.Second, "5 pages waiting", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.gathering == nil {
			return false, "no batch gathering"
		}
		return len(h.gathering.ids) == pages, fmt.Sprintf("%d ids gathered", len(h.gathering.ids))
	})
	<-h.fallback
	wg.Wait()
	for i := range pages {
		want := fmt.Sprint([]ItemCounts{{ItemID: fmt.Sprintf("b-%d", i), Views: map[bool]uint64{true: 3}[i == 3]}, {ItemID: "b-3", Views: 3}})
		if codes[i] != 200 || fmt.Sprint(got[i].Items) != want {
			t.Errorf("page %d: got %d %v; want 200 %s", i, codes[i], got[i].Items, want)
		}
	}
	if n := counting.queries.Load(); n != 1 {
		t.Errorf("ClickHouse queries: got %d; want 1 for the 5 waiting pages", n)
	}
}

// countingConn counts the queries sent through a real connection.
type countingConn struct {
	driver.Conn
	queries atomic.Int32
}

func (c *countingConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	c.queries.Add(1)
	return c.Conn.Query(ctx, query, args...)
}

// fallbacks is the count of reg's fallback counter with result.
func fallbacks(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "tally_read_clickhouse_fallback_total" {
			for _, m := range f.GetMetric() {
				if m.GetLabel()[0].GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// redisReads is how many Redis round trips of count reads reg's histogram has timed.
func redisReads(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "tally_read_redis_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("tally_read_redis_seconds not registered")
	return 0
}

// Like totals ride in the same Redis round trip as the view totals and are exact at once;
// while the like state is being rebuilt, counts answer 503 rather than wrong totals.
func TestCountsWithLikes(t *testing.T) {
	ctx := context.Background()
	conn, rdb := fresh(t)
	srv := startHandler(t, New(Options{ClickHouse: conn, Redis: rdb, Likes: likestate.QueueTotals, Logger: infra.Logger, Registry: prometheus.NewRegistry()}))
	setTotals(t, rdb, map[string]int64{"l-a": 4}, nil)
	if err := rdb.Set(ctx, likestate.ReadyKey, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	recs := make([]likestate.Record, 30)
	for i := range recs {
		recs[i] = likestate.Record{Offset: int64(i), Like: schemas.Like{ItemID: "l-a", UserID: fmt.Sprintf("u%d", i%20), Liked: i < 20}}
	}
	if _, err := likestate.NewStore(rdb).ApplyRecords(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	ten, zero := int64(10), int64(0)
	var batch struct{ Items []ItemCounts }
	if code := getJSON(t, srv.URL+"/v1/counts?ids=l-a,l-none", &batch); code != 200 {
		t.Fatalf("got %d; want 200", code)
	}
	want := []ItemCounts{{ItemID: "l-a", Views: 4, Likes: &ten}, {ItemID: "l-none", Likes: &zero}}
	if mustJSON(batch.Items) != mustJSON(want) {
		t.Errorf("got %s; want %s", mustJSON(batch.Items), mustJSON(want))
	}
	if err := rdb.Del(ctx, likestate.ReadyKey).Err(); err != nil {
		t.Fatal(err)
	}
	var e struct{ Error string }
	if code := getJSON(t, srv.URL+"/v1/items/l-a/counts", &e); code != 503 || !strings.Contains(e.Error, "rebuilt") {
		t.Errorf("while rebuilding: got %d %q; want 503 saying the state is being rebuilt", code, e.Error)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The largest list one ClickHouse read takes, of ids of the longest allowed length, makes a
// query text far beyond ClickHouse's default max_query_size.
func TestCountsOfLongIDs(t *testing.T) {
	conn, _ := fresh(t)
	ts := time.Now().Add(-time.Hour)
	items := make([]string, chclient.MaxListItems)
	for i := range items {
		id := fmt.Sprintf("long-%d-", i)
		items[i] = id + strings.Repeat("x", schemas.MaxIDLen-len(id))
	}
	addViews(t, conn, items[0], ts, 3)
	addViews(t, conn, items[len(items)-1], ts, 4)
	got, err := source{conn}.counts(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[items[0]].Views != 3 || got[items[len(items)-1]].Views != 4 {
		t.Errorf("got %d items with views %d and %d; want 2 items with 3 and 4", len(got), got[items[0]].Views, got[items[len(items)-1]].Views)
	}
}

// A batch the aggregator applies is read at once: there is no cache in between.
func TestAppliedTotalsAreReadAtOnce(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Now()}
	_, srv := newTestHandler(t, c)
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	defer rdb.Close()
	setTotals(t, rdb, map[string]int64{"a-a": 1}, nil)
	views := func() uint64 {
		var got ItemCounts
		getJSON(t, srv.URL+"/v1/items/a-a/counts", &got)
		return got.Views
	}
	if got := views(); got != 1 {
		t.Fatalf("got %d views; want 1", got)
	}
	if _, err := totals.New(rdb, TotalsName).Apply(ctx, 0, 1, totals.Unchecked, 11, map[string]int64{"a-a": 4}); err != nil {
		t.Fatal(err)
	}
	if got := views(); got != 5 {
		t.Errorf("got %d views after a batch of 4; want 5", got)
	}
}

func TestSeries(t *testing.T) {
	now := testinfra.RecentNoon().Add(30*time.Minute + 10*time.Second)
	c := &clock{t: now}
	conn, srv := newTestHandler(t, c)
	minute := now.Truncate(time.Minute)
	addViews(t, conn, "s-a", minute.Add(-2*time.Minute+5*time.Second), 3)
	addViews(t, conn, "s-a", minute.Add(-2*time.Minute+50*time.Second), 1)
	addViews(t, conn, "s-a", minute.Add(3*time.Second), 4)
	var got struct {
		Granularity string
		Points      []Point
	}
	url := fmt.Sprintf("%s/v1/items/s-a/views?granularity=minute&from=%d", srv.URL, minute.Add(-3*time.Minute).UnixMilli())
	if code := getJSON(t, url, &got); code != 200 {
		t.Fatalf("got %d; want 200", code)
	}
	want := []uint64{0, 4, 0, 4}
	if len(got.Points) != len(want) {
		t.Fatalf("got %d points %+v; want %d", len(got.Points), got.Points, len(want))
	}
	for i, p := range got.Points {
		if p.Views != want[i] || !p.T.Equal(minute.Add(time.Duration(i-3)*time.Minute)) {
			t.Errorf("point %d: got %v %d; want %v %d", i, p.T, p.Views, minute.Add(time.Duration(i-3)*time.Minute), want[i])
		}
	}
	var sec struct{ Points []Point }
	url = fmt.Sprintf("%s/v1/items/s-a/views?granularity=second&from=%d&to=%d", srv.URL, minute.Add(-2*time.Minute).UnixMilli(), minute.Add(-time.Minute-time.Second).UnixMilli())
	if code := getJSON(t, url, &sec); code != 200 || len(sec.Points) != 60 || sec.Points[5].Views != 3 || sec.Points[50].Views != 1 {
		t.Errorf("got %d with %d points; want 200, 60 points with 3 at :05 and 1 at :50", code, len(sec.Points))
	}
}

func TestBadParameters(t *testing.T) {
	c := &clock{t: time.Now()}
	_, srv := newTestHandler(t, c)
	tests := []struct {
		path, field string
	}{
		{"/v1/counts", "ids"},
		{"/v1/counts?ids=" + strings.Repeat("a,", 101), "ids"},
		{"/v1/counts?ids=ok,b%20ad", "ids"},
		{"/v1/items/" + strings.Repeat("x", 129) + "/counts", "item_id"},
		{"/v1/items/a/views?granularity=week", "granularity"},
		{"/v1/items/a/views?from=yesterday", "from"},
		{"/v1/items/a/views?to=later", "to"},
		{"/v1/items/a/views?from=2026-11-30T12:00:00Z&to=2026-11-30T11:00:00Z", "from"},
		{"/v1/items/a/views?granularity=second&from=2026-01-01T00:00:00Z&to=2026-11-30T11:00:00Z", "from"},
		// Ranges the rollup tables cannot hold are refused before ClickHouse sees them.
		{"/v1/items/a/views?granularity=day&from=9999-12-01T00:00:00Z&to=9999-12-31T00:00:00Z", "from"},
		{"/v1/items/a/views?granularity=day&from=2099-12-01T00:00:00Z&to=2100-01-01T00:00:00Z", "to"},
		{"/v1/items/a/views?granularity=hour&from=2105-12-01T00:00:00Z&to=2105-12-02T00:00:00Z", "from"},
		{"/v1/items/a/views?granularity=minute&from=-60000&to=0", "from"},
		{"/v1/items/a/views?granularity=day&from=1969-12-01T00:00:00Z&to=1970-01-02T00:00:00Z", "from"},
		{"/v1/items/a/views?granularity=day&to=9223372036854775807", "to"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var e struct{ Error, Field string }
			if code := getJSON(t, srv.URL+tt.path, &e); code != 400 || e.Field != tt.field {
				t.Errorf("got %d field %q (%s); want 400 naming %s", code, e.Field, e.Error, tt.field)
			}
		})
	}
}

func TestRedisDownIs503(t *testing.T) {
	conn, _ := fresh(t)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	h := New(Options{ClickHouse: conn, Redis: rdb, Logger: infra.Logger, Registry: prometheus.NewRegistry()})
	mux := http.NewServeMux()
	h.Register(api.NewRouter(mux, prometheus.NewRegistry()))
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/v1/counts?ids=a,b", nil))
	if w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Errorf("got %d (Retry-After %q); want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
}

// The last bucket before the end of the allowed range is served (zeros), so the bound is not
// off by one.
func TestSeriesAtTheEndOfTheRange(t *testing.T) {
	_, srv := newTestHandler(t, &clock{t: time.Now()})
	var got struct{ Points []Point }
	if code := getJSON(t, srv.URL+"/v1/items/a/views?granularity=day&from=2099-12-01T00:00:00Z&to=2099-12-31T00:00:00Z", &got); code != 200 || len(got.Points) != 31 {
		t.Errorf("got %d with %d points; want 200 with 31 zero days", code, len(got.Points))
	}
}

// A store's error is logged, never answered: the 503 says what is unavailable and nothing of
// ClickHouse's error text (tables, databases, addresses).
func TestStoreErrorsStayInternal(t *testing.T) {
	conn, srv := newTestHandler(t, &clock{t: time.Now()})
	for _, table := range []string{"views_by_minute", "views_total"} {
		if err := conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+table); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{"/v1/items/x/views?granularity=minute", "/v1/items/never-seen/counts"} {
		t.Run(path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct{ Error string }
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "unavailable") {
				t.Fatalf("got %d %s; want 503 with Retry-After and a JSON error saying unavailable", resp.StatusCode, b)
			}
			for _, internal := range []string{"views_", "readtest", "127.0.0.1", "code:", "Exception"} {
				if strings.Contains(string(b), internal) {
					t.Errorf("got %s; want no %q from ClickHouse's error in the answer", b, internal)
				}
			}
		})
	}
}

func FuzzParseSeriesQuery(f *testing.F) {
	f.Add("minute", "", "")
	f.Add("second", "2026-11-30T12:00:00Z", "1796039940000")
	f.Add("day", "-1", "9999999999999")
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, g, from, to string) {
		q, err := ParseSeriesQuery(map[string][]string{"granularity": {g}, "from": {from}, "to": {to}}, now)
		if err != nil {
			return
		}
		if n := q.Points(); n < 1 || n > maxPoints {
			t.Fatalf("got %d points accepted; want 1..%d", n, maxPoints)
		}
		if q.From.Unix() < 0 || q.To.Unix() > seriesEndUnix {
			t.Fatalf("got range %s..%s accepted; want it within 1970-01-01..2100-01-01", q.From, q.To)
		}
	})
}

// TestUniqueViewersByDay: at day granularity each day's unique viewers are the union of its
// latest whole sketch and the deltas written since its partition's last fold (an older whole
// sketch, and a delta at or below the fold, add nothing; a repeated delta counts no viewer twice),
// and the range's the union of its days (viewers of both days counted once). The all-time
// sketch is no day's; a finer granularity carries none.
func TestUniqueViewersByDay(t *testing.T) {
	now := testinfra.RecentNoon()
	c := &clock{t: now}
	conn, srv := newTestHandler(t, c)
	ctx := context.Background()
	day := now.Truncate(24 * time.Hour)
	sketch := func(from, to int) string {
		sk := hyperloglog.New14()
		for i := from; i < to; i++ {
			sk.Insert([]byte(fmt.Sprintf("viewer-%d", i)))
		}
		b, err := sk.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	whole := func(d time.Time, blob string, at time.Duration) {
		exec("INSERT INTO unique_viewers (item_id, day, sketch, viewers, updated_at) VALUES ('u-a', ?, ?, 0, ?)", d.Format(time.DateOnly), blob, now.Add(at))
	}
	delta := func(part uint16, end int64, d time.Time, blob string) {
		exec("INSERT INTO unique_viewer_deltas (partition, end_offset, item_id, day, sketch, viewers, written_at) VALUES (?, ?, 'u-a', ?, ?, 0, now64(6))", part, end, d.Format(time.DateOnly), blob)
	}
	yesterday := day.AddDate(0, 0, -1)
	whole(yesterday, sketch(2000, 2100), -time.Hour) // an older whole sketch: only the latest is read
	whole(yesterday, sketch(0, 1000), time.Minute)
	whole(day, sketch(900, 1100), 0)
	delta(3, 100, day, sketch(5000, 6000)) // folded, so in the whole sketch already (its viewers are not here: it must be left out)
	delta(3, 300, day, sketch(1100, 1300))
	delta(3, 300, day, sketch(1100, 1300))
	delta(3, 400, day, "not a sketch")
	exec("INSERT INTO sketch_folds (partition, end_offset, written_at) VALUES (3, 200, now64(3))")
	whole(time.Unix(0, 0), sketch(0, 100_000), 0) // the all-time sketch

	var got struct {
		Points        []Point
		UniqueViewers *uint64 `json:"unique_viewers"`
	}
	url := fmt.Sprintf("%s/v1/items/u-a/views?granularity=day&from=%d&to=%d", srv.URL, yesterday.AddDate(0, 0, -1).UnixMilli(), day.UnixMilli())
	if code := getJSON(t, url, &got); code != 200 || len(got.Points) != 3 || got.UniqueViewers == nil {
		t.Fatalf("got %d with %+v; want 200 and 3 points with unique viewers", code, got)
	}
	near := func(got *uint64, want float64) bool { return got != nil && math.Abs(float64(*got)-want) <= 0.02*want }
	for i, want := range []float64{0, 1000, 400} {
		if p := got.Points[i]; (want == 0 && (p.UniqueViewers == nil || *p.UniqueViewers != 0)) || (want > 0 && !near(p.UniqueViewers, want)) {
			t.Errorf("day %d: got %v unique viewers; want %v within 2%%", i, p.UniqueViewers, want)
		}
	}
	if !near(got.UniqueViewers, 1300) { // 0..1000 and 900..1300
		t.Errorf("got %d unique viewers over the range; want 1300 within 2%%", *got.UniqueViewers)
	}
	var hourly struct {
		Points        []map[string]any
		UniqueViewers *uint64 `json:"unique_viewers"`
	}
	url = fmt.Sprintf("%s/v1/items/u-a/views?granularity=second&from=%d&to=%d", srv.URL, day.UnixMilli(), day.Add(time.Minute).UnixMilli())
	if code := getJSON(t, url, &hourly); code != 200 || hourly.UniqueViewers != nil || hourly.Points[0]["unique_viewers"] != nil {
		t.Errorf("got %d with %+v at second granularity; want 200 without unique viewers", code, hourly)
	}
}

// TestUniqueViewersByHourAndMinute: at hour granularity each hour's unique viewers are the union
// of the register rows sent for it (a repeated row counts no viewer twice), an hour without rows
// has none, and the range's are the union of its hours (viewers of two hours counted once); at
// minute granularity the same of each minute's registers, kept in its hour's rows, and the
// range's leave out the minutes of its first hour before from.
func TestUniqueViewersByHourAndMinute(t *testing.T) {
	now := testinfra.RecentNoon()
	conn, srv := newTestHandler(t, &clock{t: now})
	ctx := context.Background()
	hour := now.Truncate(time.Hour)
	send := func(h time.Time, minute, from, to int) {
		t.Helper()
		var r viewerhours.Hour
		for i := from; i < to; i++ {
			r.Add(minute, xxhash.Sum64String(fmt.Sprintf("viewer-%d", i)))
		}
		regs, ranks, keys, minuteRanks := r.Pairs()
		if err := conn.Exec(ctx, "INSERT INTO unique_viewers_by_hour (item_id, hour, registers, minutes) VALUES ('h-a', ?, (?, ?), (?, ?))",
			h, regs, widen(ranks), keys, widen(minuteRanks)); err != nil {
			t.Fatal(err)
		}
	}
	send(hour.Add(-2*time.Hour), 5, 0, 600)
	send(hour.Add(-2*time.Hour), 6, 400, 1000)
	send(hour, 0, 900, 1300)
	send(hour, 0, 900, 1300)
	send(hour.Add(time.Hour), 0, 0, 5000) // outside the ranges

	near := func(got *uint64, want float64) bool {
		return got != nil && (want == 0 && *got == 0 || want > 0 && math.Abs(float64(*got)-want) <= 0.02*want)
	}
	tests := []struct {
		name        string
		granularity string
		from, to    time.Time
		points      map[int]float64 // by index; the other points want 0
		n           int
		rangeWant   float64
	}{
		{"hours", "hour", hour.Add(-2 * time.Hour), hour, map[int]float64{0: 1000, 2: 400}, 3, 1300},
		{"minutes of one hour", "minute", hour.Add(-2*time.Hour + 5*time.Minute), hour.Add(-2*time.Hour + 7*time.Minute), map[int]float64{0: 600, 1: 600}, 3, 1000},
		{"minutes over three hours, from within the first", "minute", hour.Add(-2*time.Hour + 6*time.Minute), hour.Add(time.Minute),
			map[int]float64{0: 600, 114: 400}, 116, 900}, // 400..1000 and 900..1300
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got struct {
				Points        []Point
				UniqueViewers *uint64 `json:"unique_viewers"`
			}
			url := fmt.Sprintf("%s/v1/items/h-a/views?granularity=%s&from=%d&to=%d", srv.URL, tt.granularity, tt.from.UnixMilli(), tt.to.UnixMilli())
			if code := getJSON(t, url, &got); code != 200 || len(got.Points) != tt.n || got.UniqueViewers == nil {
				t.Fatalf("got %d with %d points, range unique viewers %v; want 200, %d points and unique viewers", code, len(got.Points), got.UniqueViewers, tt.n)
			}
			for i, p := range got.Points {
				if want := tt.points[i]; !near(p.UniqueViewers, want) {
					t.Errorf("point %d (%s): got %v unique viewers; want %v within 2%%", i, p.T, p.UniqueViewers, want)
				}
			}
			if !near(got.UniqueViewers, tt.rangeWant) {
				t.Errorf("got %d unique viewers over the range; want %v within 2%%", *got.UniqueViewers, tt.rangeWant)
			}
		})
	}
}

// widen returns ranks as uint16s: a []uint8 binds as a string.
func widen(ranks []uint8) []uint16 {
	wide := make([]uint16, len(ranks))
	for i, r := range ranks {
		wide[i] = uint16(r)
	}
	return wide
}
