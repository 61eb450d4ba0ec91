// Package read is the collector's read API for counts: one item, a feed page of up to 100 items
// in one call, and an item's views as a time series. Totals come from a Redis cache filled from
// ClickHouse (see cache_redis.go for freshness); series come from ClickHouse's rollup tables.
// Like totals, when a likes source is set, are exact and read at request time.
//
// The Handler owns two background goroutines (the cache's filler of misses and refresher of
// stale entries) between Start and Stop; reads need Start to have run.
package read

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/collector/api"
	"tally/schemas"
)

// maxPoints bounds a series, so one request cannot ask for years of seconds.
const maxPoints = 10000

// seriesEndUnix (2100-01-01T00:00:00Z) bounds a series' end: the rollup tables store DateTime
// and Date columns, which end in 2106 and 2149, and a range past them is an error inside
// ClickHouse, so it is refused as a bad parameter before any query. The start is bounded by
// the Unix epoch, where both column types begin.
const seriesEndUnix = 4102444800

// LikeTotals queues on pipe the read of items' exact like totals (absent = 0) and returns a
// function that gives them once pipe ran: the totals ride in the same round trip to Redis as
// the cached counts.
type LikeTotals func(ctx context.Context, pipe redis.Pipeliner, items []string) func() (map[string]int64, error)

// Handler serves the count routes.
type Handler struct {
	cache  *cache
	likes  LikeTotals
	now    func() time.Time
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	// redisRead times a count read's Redis round trip: with tally_http_request_seconds it
	// splits a slow answer into waiting on Redis and everything else.
	redisRead prometheus.Histogram
}

// New returns a handler reading ClickHouse through conn and caching in rdb for ttl. likes may
// be nil until likes are served.
func New(conn driver.Conn, rdb *redis.Client, ttl time.Duration, likes LikeTotals, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	h := &Handler{cache: newCache(rdb, source{conn}, ttl, now, logger, reg), likes: likes, now: now, logger: logger,
		redisRead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_read_redis_seconds",
			Help:    "Round trip of a count read's one Redis pipeline (cached counts and like totals), failed ones included.",
			Buckets: api.LatencyBuckets(),
		})}
	reg.MustRegister(h.redisRead)
	return h
}

// Start runs the cache's filler and refresher.
func (h *Handler) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.cache.fillLoop(ctx) }()
	go func() { defer wg.Done(); h.cache.refreshLoop(ctx) }()
	go func() { wg.Wait(); close(h.done) }()
}

// Stop ends the filler and the refresher.
func (h *Handler) Stop() {
	h.cancel()
	<-h.done
}

// Register adds the read routes to r.
func (h *Handler) Register(r *api.Router) {
	r.Handle("GET /v1/items/{item_id}/counts", "item_counts", h.itemCounts)
	r.Handle("GET /v1/counts", "counts", h.batchCounts)
	r.Handle("GET /v1/items/{item_id}/views", "series", h.series)
}

// ItemCounts is one item's counts as the API returns them.
type ItemCounts struct {
	ItemID        string `json:"item_id"`
	Views         uint64 `json:"views"`
	UniqueViewers uint64 `json:"unique_viewers"`
	Likes         *int64 `json:"likes,omitempty"`
}

func (h *Handler) itemCounts(w http.ResponseWriter, r *http.Request) int {
	id := r.PathValue("item_id")
	if err := schemas.CheckID("item_id", id, true); err != nil {
		return api.BadRequest(w, err)
	}
	items, err := h.counts(r.Context(), []string{id})
	if err != nil {
		return h.unavailable(w, err)
	}
	return api.JSON(w, http.StatusOK, items[0])
}

func (h *Handler) batchCounts(w http.ResponseWriter, r *http.Request) int {
	ids, err := api.IDs(r.URL.Query()["ids"])
	if err != nil {
		return api.BadRequest(w, err)
	}
	items, err := h.counts(r.Context(), ids)
	if err != nil {
		return h.unavailable(w, err)
	}
	return api.JSON(w, http.StatusOK, struct {
		Items []ItemCounts `json:"items"`
	}{items})
}

func (h *Handler) counts(ctx context.Context, ids []string) ([]ItemCounts, error) {
	pipe := h.cache.rdb.Pipeline()
	cached := h.cache.queue(ctx, pipe, ids)
	var likeTotals func() (map[string]int64, error)
	if h.likes != nil {
		likeTotals = h.likes(ctx, pipe, ids)
	}
	t0 := time.Now()
	_, err := pipe.Exec(ctx)
	h.redisRead.Observe(time.Since(t0).Seconds())
	if err != nil {
		return nil, fmt.Errorf("read count cache and like totals: %w", err)
	}
	// Like totals first: while likes are being rebuilt the answer is a 503 whatever the cache
	// holds, so it should not wait for a ClickHouse fill of never-cached items.
	var likes map[string]int64
	if likeTotals != nil {
		if likes, err = likeTotals(); err != nil {
			return nil, err
		}
	}
	got, err := h.cache.result(ctx, ids, cached)
	if err != nil {
		return nil, err
	}
	out := make([]ItemCounts, len(ids))
	for i, id := range ids {
		c := got[id]
		out[i] = ItemCounts{ItemID: id, Views: c.Views, UniqueViewers: c.UniqueViewers}
		if likes != nil {
			n := likes[id]
			out[i].Likes = &n
		}
	}
	return out, nil
}

// Point is one bucket of a series.
type Point struct {
	T     time.Time `json:"t"`
	Views uint64    `json:"views"`
}

func (h *Handler) series(w http.ResponseWriter, r *http.Request) int {
	id := r.PathValue("item_id")
	if err := schemas.CheckID("item_id", id, true); err != nil {
		return api.BadRequest(w, err)
	}
	q, err := ParseSeriesQuery(r.URL.Query(), h.now())
	if err != nil {
		return api.BadRequest(w, err)
	}
	got, err := h.cache.src.series(r.Context(), id, q.Granularity, q.From, q.To)
	if err != nil {
		h.logger.Warn("read series", "item_id", id, "granularity", q.Granularity, "from", q.From, "to", q.To, "err", err)
		return api.Unavailable(w, "series are unavailable right now; retry later")
	}
	points := make([]Point, 0, q.points())
	step := q.Granularity.step()
	for t := q.From; t.Before(q.To); t = t.Add(step) {
		points = append(points, Point{T: t, Views: got[t.Unix()]})
	}
	return api.JSON(w, http.StatusOK, struct {
		ItemID      string      `json:"item_id"`
		Granularity Granularity `json:"granularity"`
		From        time.Time   `json:"from"`
		To          time.Time   `json:"to"`
		Points      []Point     `json:"points"`
	}{id, q.Granularity, q.From, q.To, points})
}

// SeriesQuery is a validated series request: [From, To) aligned to Granularity.
type SeriesQuery struct {
	Granularity Granularity
	From, To    time.Time
}

func (q SeriesQuery) points() int { return int(q.To.Sub(q.From) / q.Granularity.step()) }

// ParseSeriesQuery reads granularity (default minute), to (default now) and from (default 60
// buckets before to), each time as RFC 3339 or Unix milliseconds. Both ends are aligned down to
// the granularity; the range must be non-empty, at most maxPoints buckets, and lie between the
// Unix epoch and 2100-01-01, so that no range the tables cannot hold reaches ClickHouse.
func ParseSeriesQuery(v url.Values, now time.Time) (SeriesQuery, error) {
	q := SeriesQuery{Granularity: Granularity(v.Get("granularity"))}
	switch q.Granularity {
	case "":
		q.Granularity = Minute
	case Second, Minute, Hour, Day:
	default:
		return q, &schemas.FieldError{Field: "granularity", Reason: fmt.Sprintf("got %q; want second, minute, hour or day", q.Granularity)}
	}
	step := q.Granularity.step()
	q.To = now
	if s := v.Get("to"); s != "" {
		ms, err := schemas.ParseTS(s)
		if err != nil {
			return q, &schemas.FieldError{Field: "to", Reason: err.Error()}
		}
		q.To = time.UnixMilli(ms)
	}
	q.To = q.To.UTC().Truncate(step).Add(step) // include the bucket holding `to`
	q.From = q.To.Add(-60 * step)
	if s := v.Get("from"); s != "" {
		ms, err := schemas.ParseTS(s)
		if err != nil {
			return q, &schemas.FieldError{Field: "from", Reason: err.Error()}
		}
		q.From = time.UnixMilli(ms).UTC().Truncate(step)
	}
	// A given from is checked first; a defaulted one follows from to, so to is the culprit then.
	epoch, end := time.Unix(0, 0).UTC(), time.Unix(seriesEndUnix, 0).UTC()
	badFrom := &schemas.FieldError{Field: "from", Reason: fmt.Sprintf("must be from %s to before %s", epoch.Format(time.RFC3339), end.Format(time.RFC3339))}
	if v.Get("from") != "" && (q.From.Before(epoch) || !q.From.Before(end)) {
		return q, badFrom
	}
	if q.To.After(end) {
		return q, &schemas.FieldError{Field: "to", Reason: fmt.Sprintf("must be before %s", end.Format(time.RFC3339))}
	}
	if q.From.Before(epoch) {
		return q, badFrom
	}
	if !q.From.Before(q.To) {
		return q, &schemas.FieldError{Field: "from", Reason: "must be before to"}
	}
	if n := q.To.Sub(q.From) / step; n > maxPoints {
		return q, &schemas.FieldError{Field: "from", Reason: fmt.Sprintf("range has %d %s buckets; at most %d allowed (use a coarser granularity)", n, q.Granularity, maxPoints)}
	}
	return q, nil
}

// unavailable logs err and answers a generic 503: a store's error text names internal addresses,
// databases and tables, which are not the client's business.
func (h *Handler) unavailable(w http.ResponseWriter, err error) int {
	var public api.PublicError
	if errors.As(err, &public) {
		return api.Unavailable(w, public.Error()+"; retry shortly")
	}
	h.logger.Warn("read counts", "err", err)
	return api.Unavailable(w, "counts are unavailable right now; retry later")
}
