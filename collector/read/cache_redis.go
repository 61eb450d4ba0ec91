package read

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tally/platform/chclient"
)

// cache keeps items' counts in Redis. An entry is fresh for ttl after it was read from
// ClickHouse; a stale entry is still served, and a background refresh replaces it, so a hot feed
// page never waits on ClickHouse and a total is at most about ttl plus one refresh behind what
// ClickHouse holds. Entries expire from Redis after hardTTL of not being refreshed.
type cache struct {
	rdb    *redis.Client
	src    source
	ttl    time.Duration
	now    func() time.Time
	logger *slog.Logger

	mu      sync.Mutex
	pending map[string]struct{} // stale items queued for refresh
	wake    chan struct{}
	fills   chan fillRequest // items never cached, waiting for the filler

	hits, stale, misses prometheus.Counter
}

const keyPrefix = "tally:counts:"

// hardTTL is how long an entry stays in Redis without a refresh (see cache).
const hardTTL = 10 * time.Minute

// maxItemsPerQuery bounds one ClickHouse read of counts. A read costs about the same whatever
// its list holds (the totals tables are scanned through their unmerged parts, and a list of a
// few thousand random items touches every granule), so refreshing a working set in few large
// reads costs the engine far less than in many small ones.
const maxItemsPerQuery = chclient.MaxListItems

func newCache(rdb *redis.Client, src source, ttl time.Duration, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *cache {
	c := &cache{
		rdb: rdb, src: src, ttl: ttl, now: now, logger: logger,
		pending: map[string]struct{}{}, wake: make(chan struct{}, 1), fills: make(chan fillRequest, 4096),
		hits:   prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_read_cache_hits_total", Help: "Counts served fresh from the Redis cache."}),
		stale:  prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_read_cache_stale_total", Help: "Counts served stale from the cache while a refresh runs."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_read_cache_misses_total", Help: "Counts read from ClickHouse because the cache had none."}),
	}
	reg.MustRegister(c.hits, c.stale, c.misses)
	return c
}

// queue queues on pipe the read of items' cache entries, for result.
func (c *cache) queue(ctx context.Context, pipe redis.Pipeliner, items []string) *redis.SliceCmd {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = keyPrefix + it
	}
	return pipe.MGet(ctx, keys...)
}

// result returns the counts of items (zeros for unknown ones) from their queued cache read,
// reading ClickHouse only for items the cache has never seen.
func (c *cache) result(ctx context.Context, items []string, cmd *redis.SliceCmd) (map[string]Counts, error) {
	vals, err := cmd.Result()
	if err != nil {
		return nil, fmt.Errorf("read count cache: %w", err)
	}
	now := c.now()
	out := make(map[string]Counts, len(items))
	var missing, stale []string
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			missing = append(missing, items[i])
			continue
		}
		cnt, fetched, err := decodeEntry(s)
		if err != nil {
			missing = append(missing, items[i])
			continue
		}
		out[items[i]] = cnt
		if now.Sub(fetched) > c.ttl {
			stale = append(stale, items[i])
		}
	}
	c.misses.Add(float64(len(missing)))
	c.stale.Add(float64(len(stale)))
	c.hits.Add(float64(len(items) - len(missing) - len(stale)))
	if len(stale) > 0 {
		c.enqueue(stale)
	}
	if len(missing) > 0 {
		fresh, err := c.fillCoalesced(ctx, missing)
		if err != nil {
			return nil, err
		}
		for k, v := range fresh {
			out[k] = v
		}
	}
	return out, nil
}

type fillRequest struct {
	items []string
	reply chan fillResult
}

type fillResult struct {
	counts map[string]Counts
	err    error
}

// fillCoalesced hands never-cached items to the filler and waits for them. Concurrent misses
// are answered by one ClickHouse query round instead of one query each: at start, or when a feed
// brings many new items, a query per request would queue behind ingest in the engine.
func (c *cache) fillCoalesced(ctx context.Context, items []string) (map[string]Counts, error) {
	req := fillRequest{items: items, reply: make(chan fillResult, 1)}
	select {
	case c.fills <- req:
	case <-ctx.Done():
		return nil, fmt.Errorf("queue cache fill: %w", ctx.Err())
	}
	select {
	case r := <-req.reply:
		return r.counts, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for cache fill: %w", ctx.Err())
	}
}

// fillLoop answers fill requests until ctx ends: it takes every request waiting, reads the union
// of their items in rounds of at most maxItemsPerQuery, and answers each request with its items.
func (c *cache) fillLoop(ctx context.Context) {
	for {
		var batch []fillRequest
		select {
		case <-ctx.Done():
			return
		case r := <-c.fills:
			batch = append(batch, r)
		}
	drain:
		for {
			select {
			case r := <-c.fills:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		seen := map[string]struct{}{}
		var items []string
		for _, r := range batch {
			for _, it := range r.items {
				if _, ok := seen[it]; !ok {
					seen[it] = struct{}{}
					items = append(items, it)
				}
			}
		}
		got := make(map[string]Counts, len(items))
		var err error
		for round := range slices.Chunk(items, maxItemsPerQuery) {
			var part map[string]Counts
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			part, err = c.fill(rctx, round)
			cancel()
			if err != nil {
				break
			}
			maps.Copy(got, part)
		}
		for _, r := range batch {
			r.reply <- fillResult{counts: got, err: err}
		}
	}
}

// fill reads items from ClickHouse and stores them in the cache, zeros included, so an unknown
// item costs one ClickHouse read per ttl rather than one per request.
func (c *cache) fill(ctx context.Context, items []string) (map[string]Counts, error) {
	got, err := c.src.counts(ctx, items)
	if err != nil {
		return nil, err
	}
	now := c.now()
	pipe := c.rdb.Pipeline()
	out := make(map[string]Counts, len(items))
	for _, it := range items {
		cnt := got[it]
		out[it] = cnt
		pipe.Set(ctx, keyPrefix+it, encodeEntry(cnt, now), hardTTL)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("write count cache: %w", err)
	}
	return out, nil
}

func (c *cache) enqueue(items []string) {
	c.mu.Lock()
	for _, it := range items {
		c.pending[it] = struct{}{}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// refreshLoop refreshes queued stale items in batches until ctx ends. Rounds are at least half a
// ttl apart: each item is refreshed at most about once per ttl whatever the read rate, so the
// load on ClickHouse follows the working set, not the traffic, and leaves the engine to ingest.
func (c *cache) refreshLoop(ctx context.Context) {
	pace := time.NewTicker(c.ttl / 2)
	defer pace.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		c.mu.Lock()
		items := make([]string, 0, len(c.pending))
		for it := range c.pending {
			items = append(items, it)
		}
		clear(c.pending)
		c.mu.Unlock()
		for round := range slices.Chunk(items, maxItemsPerQuery) {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := c.fill(rctx, round); err != nil && ctx.Err() == nil {
				c.logger.Warn("refresh count cache", "items", len(round), "err", err)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-pace.C:
		}
	}
}

func encodeEntry(c Counts, fetched time.Time) string {
	return strconv.FormatUint(c.Views, 10) + "|" + strconv.FormatUint(c.UniqueViewers, 10) + "|" + strconv.FormatInt(fetched.UnixMilli(), 10)
}

func decodeEntry(s string) (Counts, time.Time, error) {
	parts := strings.Split(s, "|")
	if len(parts) != 3 {
		return Counts{}, time.Time{}, fmt.Errorf("cache entry %q: want views|unique|fetched_ms", s)
	}
	v, err1 := strconv.ParseUint(parts[0], 10, 64)
	u, err2 := strconv.ParseUint(parts[1], 10, 64)
	f, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Counts{}, time.Time{}, fmt.Errorf("cache entry %q: want views|unique|fetched_ms", s)
	}
	return Counts{Views: v, UniqueViewers: u}, time.UnixMilli(f), nil
}
