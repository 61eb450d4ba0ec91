// Package read is the collector's read API for counts: one item, a feed page of up to 100 items
// in one call, and an item's views as a time series.
//
// Totals and unique-viewer estimates are the ones the aggregator keeps in Redis
// (platform/totals, updated after each flush): a page's counts, together with its exact like
// totals when a likes source is set, are one Redis pipeline, one round trip, whatever the
// catalog holds. ClickHouse is read for counts only while Redis is empty or being rebuilt (the
// totals' ready marker is missing): pages waiting at the same time share one batched query, at
// most FallbackReads queries run at once so that a rebuild cannot bury the engine under reads,
// and a page whose batch is not read within FallbackTimeout, the wait for a slot and the query
// together, answers 503 with Retry-After. Series come from ClickHouse's rollup tables.
//
// A Handler is safe for concurrent use and owns no goroutines; its clients are its caller's.
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

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/schemas"
)

// maxPoints bounds a series, so one request cannot ask for years of seconds.
const maxPoints = 10000

// TotalsName is the name of the view totals in Redis (platform/totals).
const TotalsName = "views"

// seriesEndUnix (2100-01-01T00:00:00Z) bounds a series' end: the rollup tables store DateTime
// and Date columns, which end in 2106 and 2149, and a range past them is an error inside
// ClickHouse, so it is refused as a bad parameter before any query. The start is bounded by
// the Unix epoch, where both column types begin.
const seriesEndUnix = 4102444800

// LikeTotals queues on pipe the read of items' exact like totals (absent = 0) and returns a
// function that gives them once pipe ran: the totals ride in the same round trip to Redis as
// the view totals.
type LikeTotals func(ctx context.Context, pipe redis.Pipeliner, items []string) func() (map[string]int64, error)

// Options configure a Handler. ClickHouse, Redis, Logger and Registry are required.
type Options struct {
	ClickHouse driver.Conn
	Redis      redis.UniversalClient
	// Likes, when set, adds exact like totals to counts.
	Likes LikeTotals
	// Now is the clock of series defaults; nil means time.Now.
	Now      func() time.Time
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// FallbackReads bounds the ClickHouse reads of counts in flight while Redis is not ready;
	// 0 means 2.
	FallbackReads int
	// FallbackTimeout bounds a page's ClickHouse read of counts, the wait for a fallback slot
	// and the query together, before it answers 503; 0 means 1s. A page is someone waiting:
	// "retry in a second" serves them better than a spinner, and the embedded engine, busy with
	// the aggregator's inserts, takes hundreds of milliseconds for a read anyway.
	FallbackTimeout time.Duration
}

// Handler serves the count routes.
type Handler struct {
	src    source
	rdb    redis.UniversalClient
	totals *totals.Store
	likes  LikeTotals
	now    func() time.Time
	logger *slog.Logger
	// fallback holds a token per ClickHouse count read in flight.
	fallback        chan struct{}
	fallbackTimeout time.Duration
	mu              sync.Mutex
	gathering       *fallbackBatch // the batch pages join while it waits for a slot; nil if none
	// redisRead times a count read's Redis round trip: with tally_http_request_seconds it
	// splits a slow answer into waiting on Redis and everything else.
	redisRead prometheus.Histogram
	// fallbacks counts pages answered from ClickHouse ("served"), refused for want of a slot
	// ("refused"), or whose query outlasted the bound ("timed_out").
	fallbacks *prometheus.CounterVec
}

// New returns a handler as o says.
func New(o Options) *Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FallbackReads <= 0 {
		o.FallbackReads = 2
	}
	if o.FallbackTimeout <= 0 {
		o.FallbackTimeout = time.Second
	}
	h := &Handler{src: source{o.ClickHouse}, rdb: o.Redis, totals: totals.New(o.Redis, TotalsName), likes: o.Likes,
		now: o.Now, logger: o.Logger, fallback: make(chan struct{}, o.FallbackReads), fallbackTimeout: o.FallbackTimeout,
		redisRead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_read_redis_seconds",
			Help:    "Round trip of a count read's one Redis pipeline (view totals and like totals), failed ones included.",
			Buckets: api.LatencyBuckets(),
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_read_clickhouse_fallback_total",
			Help: "Count reads answered from ClickHouse while the Redis totals are not ready (served), or answered 503 for want of a fallback slot (refused) or for a query outlasting collector.fallback_timeout (timed_out).",
		}, []string{"result"}),
	}
	o.Registry.MustRegister(h.redisRead, h.fallbacks)
	return h
}

// Register adds the read routes to r.
func (h *Handler) Register(r *api.Router) {
	r.Handle("GET /v1/items/{item_id}/counts", "item_counts", h.itemCounts)
	r.Handle("GET /v1/counts", "counts", h.batchCounts)
	r.Handle("GET /v1/items/{item_id}/views", "series", h.series)
	r.Handle("GET /v1/ads/{ad_id}/clicks", "click_series", h.clickSeries(ByAd))
	r.Handle("GET /v1/campaigns/{campaign_id}/clicks", "campaign_click_series", h.clickSeries(ByCampaign))
	r.Handle("GET /v1/devices/{device}/clicks", "device_click_series", h.clickSeries(ByDevice))
	r.Handle("GET /v1/top", "top", h.top)
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

// errBusy refuses a ClickHouse fallback read that did not end within the bound: no slot freed
// (slot), or the query ran past it.
type errBusy struct {
	bound time.Duration
	slot  bool
}

func (e errBusy) Error() string {
	if e.slot {
		return fmt.Sprintf("view totals are being rebuilt and no ClickHouse read slot freed within %s", e.bound)
	}
	return fmt.Sprintf("view totals are being rebuilt and the ClickHouse read of counts took over %s", e.bound)
}

func (h *Handler) counts(ctx context.Context, ids []string) ([]ItemCounts, error) {
	pipe := h.rdb.Pipeline()
	viewTotals := h.totals.Queue(ctx, pipe, ids)
	var likeTotals func() (map[string]int64, error)
	if h.likes != nil {
		likeTotals = h.likes(ctx, pipe, ids)
	}
	t0 := time.Now()
	_, err := pipe.Exec(ctx)
	h.redisRead.Observe(time.Since(t0).Seconds())
	if err != nil {
		return nil, fmt.Errorf("read view and like totals of %d items: %w", len(ids), err)
	}
	// Like totals first: while likes are being rebuilt the answer is a 503 whatever the view
	// totals are, so it should not wait for a ClickHouse fallback.
	var likes map[string]int64
	if likeTotals != nil {
		if likes, err = likeTotals(); err != nil {
			return nil, err
		}
	}
	views, unique, ready, err := viewTotals()
	if err != nil {
		return nil, err
	}
	out := make([]ItemCounts, len(ids))
	for i, id := range ids {
		out[i] = ItemCounts{ItemID: id, Views: uint64(max(views[i], 0)), UniqueViewers: unique[i]}
		if likes != nil {
			n := likes[id]
			out[i].Likes = &n
		}
	}
	if !ready {
		got, err := h.fromClickHouse(ctx, ids)
		if err != nil {
			return nil, err
		}
		for i, id := range ids {
			out[i].Views, out[i].UniqueViewers = got[id].Views, got[id].UniqueViewers
		}
	}
	return out, nil
}

// fallbackBatch is the union of the pages waiting for one ClickHouse read of counts. The page
// that opened it (its leader) waits for a slot and runs the query; pages arriving meanwhile join
// it, so the reads of a rebuild cost the engine a few large queries, not one per page.
type fallbackBatch struct {
	ids  map[string]struct{}
	done chan struct{} // closed once got and err are set
	got  map[string]Counts
	err  error
}

// fromClickHouse reads the page's counts from ClickHouse: in one query, together with the pages
// waiting at the same time, once one of the bounded slots is free.
func (h *Handler) fromClickHouse(ctx context.Context, ids []string) (map[string]Counts, error) {
	h.mu.Lock()
	b := h.gathering
	leader := b == nil || len(b.ids)+len(ids) > chclient.MaxListItems
	if leader {
		b = &fallbackBatch{ids: make(map[string]struct{}, len(ids)), done: make(chan struct{})}
		h.gathering = b
	}
	for _, id := range ids {
		b.ids[id] = struct{}{}
	}
	h.mu.Unlock()
	if leader {
		h.runBatch(ctx, b)
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a ClickHouse read of counts: %w", ctx.Err())
	}
	if b.err != nil {
		var busy errBusy
		switch {
		case errors.As(b.err, &busy) && busy.slot:
			h.fallbacks.WithLabelValues("refused").Inc()
		case errors.As(b.err, &busy):
			h.fallbacks.WithLabelValues("timed_out").Inc()
		}
		return nil, b.err
	}
	h.fallbacks.WithLabelValues("served").Inc()
	return b.got, nil
}

// runBatch waits for a slot, closes b to joiners and reads its items, all within
// fallbackTimeout; the query also tells ClickHouse to stop at the bound (source.counts). The
// pages that joined depend on it, so it does not end with the leader's request, only with its
// own bound, which every page waiting on b is thereby within too.
func (h *Handler) runBatch(ctx context.Context, b *fallbackBatch) {
	defer close(b.done)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.fallbackTimeout)
	defer cancel()
	detach := func() {
		h.mu.Lock()
		if h.gathering == b {
			h.gathering = nil
		}
		h.mu.Unlock()
	}
	select {
	case h.fallback <- struct{}{}:
	case <-ctx.Done():
		detach()
		b.err = errBusy{bound: h.fallbackTimeout, slot: true}
		return
	}
	defer func() { <-h.fallback }()
	detach()
	items := make([]string, 0, len(b.ids))
	for id := range b.ids {
		items = append(items, id)
	}
	b.got, b.err = h.src.counts(ctx, items)
	if b.err != nil && ctx.Err() != nil {
		// Logged once per batch here rather than once per page: a slow engine during a
		// rebuild is expected, and the metric counts the pages.
		h.logger.Warn("read counts from ClickHouse: over the bound", "bound", h.fallbackTimeout, "items", len(items), "err", b.err)
		b.err = errBusy{bound: h.fallbackTimeout}
	}
}

// Point is one bucket of a series. UniqueViewers is given at minute, hour and day granularity:
// the sketches are kept per item and minute, hour and UTC day, none per second.
type Point struct {
	T             time.Time `json:"t"`
	Views         uint64    `json:"views"`
	UniqueViewers *uint64   `json:"unique_viewers,omitempty"`
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
	got, err := h.src.series(r.Context(), id, q.Granularity, q.From, q.To)
	var unique *Unique // minutes, hours and days: seconds have no sketches
	if err == nil {
		var u Unique
		var ok bool
		if u, ok, err = h.src.uniqueViewers(r.Context(), id, q.Granularity, q.From, q.To); ok {
			unique = &u
		}
	}
	if err != nil {
		h.logger.Warn("read series", "item_id", id, "granularity", q.Granularity, "from", q.From, "to", q.To, "err", err)
		return api.Unavailable(w, "series are unavailable right now; retry later")
	}
	if unique != nil && unique.Bad > 0 {
		h.logger.Warn("stored sketches that do not decode left out of unique viewers", "item_id", id, "count", unique.Bad)
	}
	points, rangeUnique := seriesPoints(q, got, unique)
	return api.JSON(w, http.StatusOK, struct {
		ItemID        string      `json:"item_id"`
		Granularity   Granularity `json:"granularity"`
		From          time.Time   `json:"from"`
		To            time.Time   `json:"to"`
		Points        []Point     `json:"points"`
		UniqueViewers *uint64     `json:"unique_viewers,omitempty"`
	}{id, q.Granularity, q.From, q.To, points, rangeUnique})
}

// seriesPoints lays views out over q's buckets, zero where none were counted, each with its
// unique viewers when unique holds them, and returns the range's unique viewers (nil without).
func seriesPoints(q SeriesQuery, views map[int64]uint64, unique *Unique) ([]Point, *uint64) {
	points := make([]Point, 0, q.Points())
	for t := q.From; t.Before(q.To); t = t.Add(q.Granularity.Step()) {
		p := Point{T: t, Views: views[t.Unix()]}
		if unique != nil {
			n := unique.Buckets[t.Unix()]
			p.UniqueViewers = &n
		}
		points = append(points, p)
	}
	if unique == nil {
		return points, nil
	}
	return points, &unique.Range
}

// SeriesQuery is a validated series request: [From, To) aligned to Granularity.
type SeriesQuery struct {
	Granularity Granularity
	From, To    time.Time
}

// Points is how many buckets the range holds.
func (q SeriesQuery) Points() int { return int(q.To.Sub(q.From) / q.Granularity.Step()) }

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
	step := q.Granularity.Step()
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
	var public api.Public
	if errors.As(err, &public) {
		return api.Unavailable(w, public.Error()+"; retry shortly")
	}
	if !errors.As(err, new(errBusy)) { // expected during a rebuild: the metric counts them
		h.logger.Warn("read counts", "err", err)
	}
	return api.Unavailable(w, "counts are unavailable right now; retry later")
}
