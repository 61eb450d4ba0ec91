package views

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"tally/platform/retry"
)

// Config tunes aggregation.
type Config struct {
	Window        time.Duration // dedupe window
	Grace         time.Duration // how late a view is still deduplicated against full state
	FlushInterval time.Duration
	MaxBatch      int           // records of one partition before an early flush
	SketchIdle    time.Duration // clean sketches untouched this long leave memory
}

// Aggregator holds the state of the assigned partitions and writes their batches.
type Aggregator struct {
	cfg    Config
	store  store
	now    func() time.Time
	logger *slog.Logger

	mu        sync.Mutex
	parts     map[int32]*partition
	lastFlush time.Time

	m metrics
}

type metrics struct {
	records, counted, poison prometheus.Counter
	flushSeconds             prometheus.Histogram
	flushErrors              prometheus.Counter
	pairs                    prometheus.GaugeFunc
	lagSeconds               prometheus.Gauge
}

// New returns an aggregator writing through conn.
func New(cfg Config, conn driver.Conn, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Aggregator {
	a := &Aggregator{cfg: cfg, store: store{conn}, now: now, logger: logger, parts: map[int32]*partition{}, lastFlush: now()}
	a.m = metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_records_total", Help: "View records consumed."}),
		counted: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_counted_total", Help: "Views counted after dedupe (first in their window)."}),
		poison:  prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_undecodable_total", Help: "Records skipped because they could not be decoded."}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_views_flush_seconds", Help: "Time to write one flush to ClickHouse.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_flush_errors_total", Help: "ClickHouse write attempts that failed and were retried."}),
		lagSeconds:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_views_flush_lag_seconds", Help: "Age of the oldest unflushed batch at the last flush."}),
	}
	a.m.pairs = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_views_dedupe_pairs", Help: "Live (viewer, item) pairs held by the dedupe windows."}, func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := 0
		for _, p := range a.parts {
			n += p.win.Len()
		}
		return float64(n)
	})
	reg.MustRegister(a.m.records, a.m.counted, a.m.poison, a.m.flushSeconds, a.m.flushErrors, a.m.pairs, a.m.lagSeconds)
	return a
}

// Assign loads the state of newly assigned partitions and returns, for each partition that has a
// checkpoint in ClickHouse, the offset to resume at. Partitions without one resume where Kafka's
// committed offset says.
func (a *Aggregator) Assign(ctx context.Context, ids []int32) (map[int32]int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	resume := map[int32]int64{}
	for _, id := range ids {
		t0 := time.Now()
		cp, err := a.store.loadCheckpoint(ctx, id)
		if err != nil {
			return nil, err
		}
		p := newPartition(id, a.cfg.Window, a.cfg.Grace, cp.end)
		pairs := 0
		if cp.found {
			p.win.Restore(cp.watermark)
			if pairs, err = a.store.loadDedupe(ctx, id, cp.end, p.win); err != nil {
				return nil, err
			}
			resume[id] = cp.end
		}
		p.lastEvict = a.now()
		a.parts[id] = p
		a.logger.Info("partition assigned", "partition", id, "checkpoint", cp.end, "found", cp.found,
			"dedupe_pairs", pairs, "took", time.Since(t0).Round(time.Millisecond))
	}
	return resume, nil
}

// Process applies records of partition id. Records below the partition's position (a fetch
// raced with a seek) are ignored, so each offset is applied once.
func (a *Aggregator) Process(id int32, offsets []int64, values [][]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.parts[id]
	if p == nil {
		return
	}
	now := a.now()
	counted0 := len(p.counted)
	poison0 := p.poison
	n := 0
	for i, off := range offsets {
		if off < p.next {
			continue
		}
		p.process(off, values[i], now)
		n++
	}
	a.m.records.Add(float64(n))
	a.m.counted.Add(float64(len(p.counted) - counted0))
	a.m.poison.Add(float64(p.poison - poison0))
}

// FlushDue reports whether the interval has passed or a partition's batch is full.
func (a *Aggregator) FlushDue() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.now().Sub(a.lastFlush) >= a.cfg.FlushInterval {
		return true
	}
	for _, p := range a.parts {
		if p.records >= a.cfg.MaxBatch {
			return true
		}
	}
	return false
}

// Flush writes every pending batch and returns the new checkpoint of each partition written.
// It retries ClickHouse errors with backoff until it succeeds or ctx ends; consumption waits
// meanwhile, so an outage turns into lag, not loss.
func (a *Aggregator) Flush(ctx context.Context) (map[int32]int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(ctx, nil)
}

// Revoke writes the pending batches of ids and forgets them: the next owner resumes from the
// checkpoint just written.
func (a *Aggregator) Revoke(ctx context.Context, ids []int32) (map[int32]int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	only := map[int32]bool{}
	for _, id := range ids {
		only[id] = true
	}
	done, err := a.flushLocked(ctx, only)
	for _, id := range ids {
		delete(a.parts, id)
	}
	a.logger.Info("partitions revoked", "partitions", ids)
	return done, err
}

// Lost forgets ids without writing: another consumer may already own them.
func (a *Aggregator) Lost(ids []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		delete(a.parts, id)
	}
	a.logger.Warn("partitions lost; pending batches dropped, the new owner replays them", "partitions", ids)
}

func (a *Aggregator) flushLocked(ctx context.Context, only map[int32]bool) (map[int32]int64, error) {
	now := a.now()
	a.m.lagSeconds.Set(now.Sub(a.lastFlush).Seconds())
	a.lastFlush = now
	var parts []*partition
	for id, p := range a.parts {
		if p.pending() && (only == nil || only[id]) {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].id < parts[j].id })
	t0 := time.Now()
	// Dedupe state and sketches first: both are idempotent, so a crash before the deltas only
	// means they are written again on replay. The deltas carry the checkpoint and go last.
	if err := a.retry(ctx, "write dedupe state", func() error { return a.store.writeDedupe(ctx, parts) }); err != nil {
		return nil, err
	}
	if err := a.retry(ctx, "write sketches", func() error {
		if err := a.store.loadSketches(ctx, parts); err != nil {
			return err
		}
		return a.store.writeSketches(ctx, parts, now)
	}); err != nil {
		return nil, err
	}
	attempted := false
	if err := a.retry(ctx, "write deltas", func() error {
		if attempted {
			done, err := a.store.batchWritten(ctx, parts[0].id, parts[0].next)
			if err != nil || done {
				return err
			}
		}
		attempted = true
		return a.store.writeDeltas(ctx, parts, now)
	}); err != nil {
		return nil, err
	}
	done := make(map[int32]int64, len(parts))
	for _, p := range parts {
		done[p.id] = p.next
		p.markFlushed(p.next, now, a.cfg.SketchIdle)
	}
	a.m.flushSeconds.Observe(time.Since(t0).Seconds())
	return done, nil
}

func (a *Aggregator) retry(ctx context.Context, what string, fn func() error) error {
	err := retry.Do(ctx, 5*time.Second, fn, func(err error, wait time.Duration) {
		a.m.flushErrors.Inc()
		a.logger.Warn("clickhouse write failed; retrying", "step", what, "err", err, "backoff", wait)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
