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
	// SketchInterval is how often dirty sketches are written. A sketch write costs far more
	// than a delta write (every touched item's whole sketch) and dashboards read unique viewers
	// less eagerly than views, so it is a multiple of FlushInterval.
	SketchInterval time.Duration
	MaxBatch       int           // records of one partition before an early flush
	SketchIdle     time.Duration // clean sketches untouched this long leave memory
}

// Aggregator holds the state of the assigned partitions and writes their batches.
type Aggregator struct {
	cfg    Config
	store  store
	now    func() time.Time
	logger *slog.Logger

	progress progress // for readiness (health.go)

	mu         sync.Mutex
	parts      map[int32]*partition
	lastFlush  time.Time
	lastSketch time.Time

	m metrics
}

type metrics struct {
	records, counted, poison prometheus.Counter
	flushSeconds             prometheus.Histogram
	sketchSeconds            prometheus.Histogram
	flushErrors              prometheus.Counter
	pairs                    prometheus.GaugeFunc
	lagSeconds               prometheus.Gauge
}

// New returns an aggregator writing through conn.
func New(cfg Config, conn driver.Conn, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Aggregator {
	a := &Aggregator{cfg: cfg, store: store{conn, newDeadLetters(now, logger, reg)}, now: now, logger: logger, parts: map[int32]*partition{}, lastFlush: now(), lastSketch: now()}
	a.m = metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_records_total", Help: "View records consumed."}),
		counted: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_counted_total", Help: "Views counted after dedupe (first in their window)."}),
		poison:  prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_undecodable_total", Help: "Records set aside because they did not decode or validate."}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_views_flush_seconds", Help: "Time to write one flush to ClickHouse.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		sketchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_views_sketch_write_seconds", Help: "Time to write the dirty unique-viewer sketches and their checkpoints.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_flush_errors_total", Help: "ClickHouse write attempts that failed and were retried."}),
		lagSeconds:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_views_flush_lag_seconds", Help: "Age of the oldest unflushed batch at the last flush."}),
	}
	a.progress.lastOK = now()
	a.m.pairs = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_views_dedupe_pairs", Help: "Live (viewer, item) pairs held by the dedupe windows."}, func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		n := 0
		for _, p := range a.parts {
			n += p.win.Len()
		}
		return float64(n)
	})
	reg.MustRegister(a.m.records, a.m.counted, a.m.poison, a.m.flushSeconds, a.m.sketchSeconds, a.m.flushErrors, a.m.pairs, a.m.lagSeconds)
	return a
}

// Assign loads the state of newly assigned partitions and returns, for each partition that has a
// checkpoint in ClickHouse, the offset to resume at: the lower of its deltas and sketch
// checkpoints. Partitions without one resume where Kafka's committed offset says.
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
		p := newPartition(id, a.cfg.Window, a.cfg.Grace, cp.end, cp.sketched)
		pairs := 0
		if cp.found {
			p.win.Restore(cp.watermark)
			if pairs, err = a.store.loadDedupe(ctx, id, cp.end, p.win); err != nil {
				return nil, err
			}
			resume[id] = p.next
		}
		p.lastEvict = a.now()
		a.parts[id] = p
		a.logger.Info("partition assigned", "partition", id, "checkpoint", cp.end, "sketch_checkpoint", cp.sketched, "found", cp.found,
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

// Flush writes every pending batch, and the sketches when the sketch interval has passed, and
// returns the new checkpoint of each partition whose deltas were written. It retries ClickHouse
// errors with backoff until it succeeds or ctx ends; consumption waits meanwhile, so an outage
// turns into lag, not loss.
func (a *Aggregator) Flush(ctx context.Context) (map[int32]int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(ctx, nil, a.now().Sub(a.lastSketch) >= a.cfg.SketchInterval)
}

// FlushAll is Flush with the sketches written whatever the interval, for a clean stop: the next
// start then replays nothing into them.
func (a *Aggregator) FlushAll(ctx context.Context) (map[int32]int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(ctx, nil, true)
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
	done, err := a.flushLocked(ctx, only, true)
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

func (a *Aggregator) flushLocked(ctx context.Context, only map[int32]bool, withSketches bool) (map[int32]int64, error) {
	now := a.now()
	a.m.lagSeconds.Set(now.Sub(a.lastFlush).Seconds())
	a.lastFlush = now
	var parts, sketchParts []*partition
	for id, p := range a.parts {
		if only != nil && !only[id] {
			continue
		}
		if p.pending() {
			parts = append(parts, p)
		}
		if withSketches && p.sketchesPending() {
			sketchParts = append(sketchParts, p)
		}
	}
	byID := func(ps []*partition) {
		sort.Slice(ps, func(i, j int) bool { return ps[i].id < ps[j].id })
	}
	byID(parts)
	byID(sketchParts)
	t0 := time.Now()
	// Dedupe state and sketches first: both are idempotent, so a crash before the deltas only
	// means they are written again on replay. The deltas carry the checkpoint and go last.
	if len(parts) > 0 {
		if err := a.retry(ctx, "write dedupe state", func() error { return a.store.writeDedupe(ctx, parts) }); err != nil {
			return nil, err
		}
	}
	if withSketches {
		// A revoke writes only its own partitions' sketches: the others keep their turn.
		if only == nil {
			a.lastSketch = now
		}
		if err := a.writeSketches(ctx, sketchParts, now); err != nil {
			return nil, err
		}
	}
	if len(parts) == 0 {
		return nil, nil
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
		p.markFlushed(p.next, now)
	}
	a.m.flushSeconds.Observe(time.Since(t0).Seconds())
	return done, nil
}

// writeSketches stores the dirty sketches of parts, then their sketch checkpoints. The order
// matters: a checkpoint only ever vouches for sketches already stored.
func (a *Aggregator) writeSketches(ctx context.Context, parts []*partition, now time.Time) error {
	if len(parts) == 0 {
		return nil
	}
	t0 := time.Now()
	// Two retries, so that a failed checkpoint insert (one row per partition) does not write
	// every sketch again.
	if err := a.retry(ctx, "write sketches", func() error {
		if err := a.store.loadSketches(ctx, parts); err != nil {
			return err
		}
		return a.store.writeSketches(ctx, parts, now)
	}); err != nil {
		return err
	}
	if err := a.retry(ctx, "write sketch checkpoints", func() error {
		return a.store.writeSketchCheckpoints(ctx, parts, now)
	}); err != nil {
		return err
	}
	for _, p := range parts {
		p.markSketched(p.next, now, a.cfg.SketchIdle)
	}
	a.m.sketchSeconds.Observe(time.Since(t0).Seconds())
	return nil
}

func (a *Aggregator) retry(ctx context.Context, what string, fn func() error) error {
	err := retry.Do(ctx, 5*time.Second, fn, func(err error, wait time.Duration) {
		a.m.flushErrors.Inc()
		a.progress.failed(a.now(), fmt.Errorf("%s: %w", what, err))
		a.repairSchema(ctx)
		a.logger.Warn("clickhouse write failed; retrying", "step", what, "err", err, "backoff", wait)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	a.progress.succeeded(a.now())
	return nil
}
