package clicks

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	countedtopic "tally/aggregator/counted"
	"tally/aggregator/deadletter"
	"tally/aggregator/fence"
	"tally/aggregator/flushpace"
	"tally/aggregator/writes"
	"tally/schemas"
)

// Config tunes the click path.
type Config struct {
	Window         time.Duration // a click id counts once within this much event time
	Grace          time.Duration // how late a click is still deduplicated against full state
	FraudThreshold float64       // clicks scored above it are not billable; 1 disables
	FlushInterval  time.Duration
	RollupInterval time.Duration // how often touched hours are recomputed
	MaxBatch       int           // records of one partition before an early flush
	// VerdictHold is how long, in click event time, a verdict stays in memory to meet clicks of
	// its id that arrive after it (a repeat counted again); at least Window + Grace. Match it
	// to the counted clicks' retention.
	VerdictHold time.Duration
	Owner       string // names this aggregator in its claims (logs and debugging)
	// Counted, when set, receives every batch's deduplicated click counts (kind ads), for topk.
	Counted countedtopic.Topic
}

// Aggregator holds the state of the assigned click partitions and writes their batches.
type Aggregator struct {
	cfg    Config
	store  store
	dead   *deadletter.Writer
	writes *writes.Tracker // the ClickHouse steps, retried, and their health for readiness
	now    func() time.Time
	logger *slog.Logger

	mu         sync.Mutex
	parts      map[int32]*partition
	pace       *flushpace.Pace
	lastRollup time.Time

	records, countedN, poison, verdicts prometheus.Counter
	flushSeconds                        prometheus.Histogram
	stepSeconds                         *prometheus.HistogramVec
	flushErrors, fenced, zombies        prometheus.Counter
	countedErrors                       prometheus.Counter
}

// New returns an aggregator writing through conn.
func New(cfg Config, conn driver.Conn, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Aggregator {
	a := &Aggregator{cfg: cfg, store: store{conn}, now: now, logger: logger, parts: map[int32]*partition{}, pace: flushpace.New(cfg.FlushInterval, now()), lastRollup: now(),
		dead:     deadletter.New(now, logger, reg, schemas.TopicClicks, schemas.TopicFraudVerdicts),
		records:  prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_records_total", Help: "Click and fraud-verdict records consumed."}),
		countedN: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_counted_total", Help: "Clicks counted after click-id dedupe."}),
		poison: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_undecodable_total",
			Help: "Click or verdict records set aside in dead_letters because they did not decode or validate, as processed (a replay counts them again)."}),
		verdicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_verdicts_total", Help: "Fraud verdicts resolved against counted clicks."}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_clicks_flush_seconds", Help: "Time to write one click flush to ClickHouse.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tally_clicks_step_seconds", Help: "Time of each ClickHouse step of a click flush, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}, []string{"step"}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_flush_errors_total", Help: "Click-path ClickHouse steps that failed and were retried."}),
		fenced:      prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_fenced_partitions_total", Help: "Click partitions dropped before writing because a newer owner had claimed them."}),
		zombies:     prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_zombie_batches_total", Help: "Click batches written by an aggregator after it had lost the partition, found and undone."}),
		countedErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_counted_errors_total",
			Help: "Failed attempts to bring the counted topic (topk's input) up to the click checkpoint (retried at the next flush)."}),
	}
	reg.MustRegister(a.records, a.countedN, a.poison, a.verdicts, a.flushSeconds, a.stepSeconds, a.flushErrors, a.fenced, a.zombies, a.countedErrors)
	a.writes = writes.New(writes.Config{Conn: conn, Now: now, Logger: logger, Errors: a.flushErrors, Steps: a.stepSeconds})
	return a
}

// Assign claims newly assigned partitions, undoes batches written by a previous owner after it
// lost the partition, recomputes the hours the previous owner may not have rolled up, loads the
// dedupe window and the verdict cache, publishes to the counted topic the durable batches it
// lacks, and returns where each partition with a checkpoint resumes in each topic.
func (a *Aggregator) Assign(ctx context.Context, ids []int32) (map[int32]offsets, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	resume := map[int32]offsets{}
	var assigned []*partition
	for _, id := range ids {
		t0 := time.Now()
		f, err := a.store.loadClaims(ctx, id)
		if err != nil {
			return nil, err
		}
		cp, err := a.store.loadCheckpoint(ctx, id, f.AnyInvalidSQL())
		if err != nil {
			return nil, err
		}
		epoch := f.MaxEpoch() + 1
		c := fence.Claim{Epoch: epoch, Start: []int64{cp.at.clicks, cp.at.verdicts}}
		if err := a.store.insertClaim(ctx, id, c, a.cfg.Owner, a.now()); err != nil {
			return nil, err
		}
		invalid := f.With(c).AnyInvalidSQL()
		hours, err := a.store.hoursAfter(ctx, id, cp.rolled, invalid)
		if err != nil {
			return nil, err
		}
		if err := a.store.deleteInvalid(ctx, id, invalid); err != nil {
			return nil, err
		}
		p := newPartition(id, a.cfg.Window.Milliseconds(), a.cfg.Grace.Milliseconds(), a.cfg.VerdictHold.Milliseconds(), a.cfg.FraudThreshold)
		p.epoch, p.next, p.flushed, p.invalid = epoch, cp.at, cp.at, invalid
		vs := make([]uint64, len(hours))
		for i := range vs {
			vs[i] = version(p)
		}
		if err := a.store.rollUp(ctx, hours, vs, invalid); err != nil {
			return nil, err
		}
		p.rolled = cp.at
		if cp.found {
			p.win.Restore(cp.watermark)
			if err := a.store.loadDedupe(ctx, id, cp.at, p.win); err != nil {
				return nil, err
			}
			if p.latest, err = a.store.loadVerdicts(ctx, id, cp.at, nil, cp.watermark-p.hold); err != nil {
				return nil, err
			}
			resume[id] = cp.at
		}
		a.parts[id] = p
		assigned = append(assigned, p)
		a.logger.Info("click partition assigned", "partition", id, "epoch", epoch, "clicks_offset", cp.at.clicks, "verdicts_offset", cp.at.verdicts,
			"found", cp.found, "hours_rolled_up", len(hours), "took", time.Since(t0).Round(time.Millisecond))
	}
	if a.cfg.Counted != nil {
		// A new owner cannot know what the previous one published. Errors are logged; the
		// partition's next flush tries again.
		for _, p := range assigned {
			_ = a.catchUpCounted(ctx, p)
		}
	}
	return resume, nil
}

// version orders hour rollup writes: a newer owner (epoch) beats an older one, and within an
// owner a later checkpoint beats an earlier.
func version(p *partition) uint64 {
	return p.epoch<<40 | uint64(p.flushed.clicks+p.flushed.verdicts)&(1<<40-1)
}

// Process applies records of one topic's partition id, in offset order. Records below the
// partition's position (a fetch raced with a seek) are ignored, so each offset is applied once.
func (a *Aggregator) Process(topic string, id int32, recs []*kgo.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.parts[id]
	if p == nil {
		return
	}
	counted0, poison0, n := len(p.counted), p.poison, 0
	for _, r := range recs {
		switch {
		case topic == schemas.TopicClicks && r.Offset >= p.next.clicks:
			p.click(r.Offset, r.Key, r.Value)
		case topic == schemas.TopicFraudVerdicts && r.Offset >= p.next.verdicts:
			p.verdict(r.Offset, r.Key, r.Value)
		default:
			continue
		}
		n++
	}
	a.records.Add(float64(n))
	a.countedN.Add(float64(len(p.counted) - counted0))
	a.poison.Add(float64(p.poison - poison0))
}

// FlushDue reports whether the flush schedule (flushpace) says a flush is due or a partition's
// batch is full.
func (a *Aggregator) FlushDue() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pace.Due(a.now()) {
		return true
	}
	for _, p := range a.parts {
		if p.records >= a.cfg.MaxBatch {
			return true
		}
	}
	return false
}

// Flush writes every pending batch, and the rollups of touched hours when the rollup interval
// has passed, and returns the new checkpoint of each partition written. ClickHouse errors are
// retried with backoff until ctx ends; consumption waits meanwhile.
func (a *Aggregator) Flush(ctx context.Context) (map[int32]offsets, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(ctx, nil, rollupsDue)
}

// FlushAll is Flush with the rollups written whatever the interval, for a clean stop.
func (a *Aggregator) FlushAll(ctx context.Context) (map[int32]offsets, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(ctx, nil, rollupsAll)
}

// Revoke writes the pending batches and rollups of ids and forgets them.
func (a *Aggregator) Revoke(ctx context.Context, ids []int32) (map[int32]offsets, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	only := map[int32]bool{}
	for _, id := range ids {
		only[id] = true
	}
	done, err := a.flushLocked(ctx, only, rollupsAll)
	for _, id := range ids {
		delete(a.parts, id)
	}
	a.logger.Info("click partitions revoked", "partitions", ids)
	return done, err
}

// Lost forgets ids without writing: another consumer may already own them.
func (a *Aggregator) Lost(ids []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		delete(a.parts, id)
	}
	a.logger.Warn("click partitions lost; pending batches dropped, the new owner replays them", "partitions", ids)
}

// rollups says when a flush writes the rollups of the hours its batches touched.
type rollups uint8

const (
	// rollupsDue writes them once the rollup interval has passed since the last write.
	rollupsDue rollups = iota
	// rollupsAll writes them now (a clean stop, a revoke).
	rollupsAll
)

// flushLocked is Flush, FlushAll and Revoke's write: the batches of the partitions of only (all
// when nil), with the rollups as which says. Its steps, in order: set refused records aside,
// resolve the verdicts, write the batch (facts, then the deltas with the checkpoint behind the
// fence), publish it to the counted topic, then the rollups.
func (a *Aggregator) flushLocked(ctx context.Context, only map[int32]bool, which rollups) (map[int32]offsets, error) {
	now := a.now()
	a.pace.Start(now)
	defer func() { a.pace.End(a.now()) }()
	withRollups := which == rollupsAll || now.Sub(a.lastRollup) >= a.cfg.RollupInterval
	var parts, all []*partition
	for id, p := range a.parts {
		if only != nil && !only[id] {
			continue
		}
		all = append(all, p)
		if p.pending() {
			parts = append(parts, p)
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].id < parts[j].id })
	t0 := time.Now()
	if err := a.setAside(ctx, parts); err != nil {
		return nil, err
	}
	if err := a.resolveVerdicts(ctx, parts); err != nil {
		return nil, err
	}
	parts, err := a.writeBatch(ctx, parts, now)
	if err != nil {
		return nil, err
	}
	done := a.publishBatch(ctx, parts)
	if withRollups {
		if err := a.writeRollups(ctx, all, only, now); err != nil {
			return nil, err
		}
	}
	if len(parts) > 0 {
		a.flushSeconds.Observe(time.Since(t0).Seconds())
	}
	return done, nil
}

// setAside writes the refused records of parts to dead_letters, before the checkpoint that
// moves past them: a crash before it replays the batch, which refuses the same records and
// writes the same rows again. So are the letters of a partition the fence drops later: the new
// owner writes the same rows.
func (a *Aggregator) setAside(ctx context.Context, parts []*partition) error {
	var dead []deadletter.Letter
	for _, p := range parts {
		dead = append(dead, p.dead...)
	}
	if len(dead) == 0 {
		return nil
	}
	if err := a.retry(ctx, "set aside refused records", func() error { return a.dead.Write(ctx, a.store.conn, dead) }); err != nil {
		return err
	}
	// Written: a flush of the same batch retried after a later step failed need not write them
	// again.
	for _, p := range parts {
		p.dead = nil
	}
	return nil
}

// resolveVerdicts looks up what the new verdicts of parts change, before the deltas: their
// corrections go into this batch's deltas.
func (a *Aggregator) resolveVerdicts(ctx context.Context, parts []*partition) error {
	for _, p := range parts {
		if p.resolved == len(p.verdicts) {
			continue
		}
		ids := p.verdictIDs()
		var before map[string]verdictState
		var stored map[string][]storedClick
		if err := a.retry(ctx, "look up verdicts' clicks", func() error {
			var err error
			if before, err = a.store.loadVerdicts(ctx, p.id, p.flushed, ids, 0); err != nil {
				return err
			}
			stored, err = a.store.loadCounted(ctx, p.id, p.flushed, ids)
			return err
		}); err != nil {
			return err
		}
		a.verdicts.Add(float64(len(p.verdicts) - p.resolved))
		p.resolve(before, stored)
	}
	return nil
}

// writeBatch stores the batches of parts: the counted clicks and verdicts (idempotent), then
// the deltas with their checkpoint, from the partitions that no newer owner has claimed, which
// it returns. A retry after an outcome it cannot know first asks whether the batch went in.
func (a *Aggregator) writeBatch(ctx context.Context, parts []*partition, now time.Time) ([]*partition, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	if err := a.retry(ctx, "write counted clicks and verdicts", func() error { return a.store.writeFacts(ctx, parts) }); err != nil {
		return nil, err
	}
	attempts := 0
	err := a.retry(ctx, "write click deltas", func() error {
		if err := a.fenceCheck(ctx, &parts); err != nil || len(parts) == 0 {
			return err
		}
		if attempts > 0 {
			done, err := a.store.batchWritten(ctx, parts[0].id, parts[0].epoch, parts[0].next)
			if err != nil || done {
				return err
			}
		}
		attempts++
		return a.store.writeDeltas(ctx, parts, now)
	})
	return parts, err
}

// publishBatch marks the stored batches of parts flushed, publishes each to the counted topic,
// and returns the new checkpoints.
func (a *Aggregator) publishBatch(ctx context.Context, parts []*partition) map[int32]offsets {
	done := make(map[int32]offsets, len(parts))
	for _, p := range parts {
		done[p.id] = p.next
		var secs []schemas.BucketCount
		if a.cfg.Counted != nil {
			secs = p.secondCounts()
		}
		from := p.flushed.clicks
		p.markFlushed()
		a.syncCounted(ctx, p, secs, from)
	}
	return done
}

// writeRollups rolls up the hours the batches of all touched. A flush of every partition (only
// nil) first undoes the batches of zombies that landed after this owner's claim (their fence
// check passed just before) rather than at the next assignment.
func (a *Aggregator) writeRollups(ctx context.Context, all []*partition, only map[int32]bool, now time.Time) error {
	if only == nil {
		a.lastRollup = now
		if err := a.retry(ctx, "undo zombie batches", func() error { return a.undoZombies(ctx, all) }); err != nil {
			return err
		}
	}
	// One statement for every partition's touched hours: the engine runs one query at a time,
	// and each has a fixed cost.
	var hours []hourKey
	var versions []uint64
	var rolled []*partition
	for _, p := range all {
		if a.parts[p.id] == nil || len(p.dirty) == 0 {
			continue
		}
		for h := range p.dirty {
			hours = append(hours, h)
			versions = append(versions, version(p))
		}
		rolled = append(rolled, p)
	}
	if len(hours) > 0 {
		if err := a.retry(ctx, "roll up click hours", func() error {
			return a.store.rollUp(ctx, hours, versions, "0")
		}); err != nil {
			return err
		}
	}
	for _, p := range rolled {
		clear(p.dirty)
		// The next marker vouches for the rollups of every batch so far.
		p.rolled = p.flushed
	}
	return nil
}

// undoZombies deletes the deltas of batches the fence makes invalid that landed after their
// owner's claim in parts, and recomputes their hours. Finding them is cheap: a batch's marker is
// in the same INSERT as its deltas, and markers (ad_id = ”) lead the table's sort order.
func (a *Aggregator) undoZombies(ctx context.Context, parts []*partition) error {
	found, err := a.store.invalidMarkers(ctx, parts)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if n := found[p.id]; n > 0 {
			if err := a.undoZombiesOf(ctx, p, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// undoZombiesOf undoes the n zombie batches found in partition p.
func (a *Aggregator) undoZombiesOf(ctx context.Context, p *partition, n uint64) error {
	hours, err := a.store.hoursAfter(ctx, p.id, p.flushed, p.invalid)
	if err != nil {
		return err
	}
	// Once the deltas are deleted a retry finds no zombie marker, so the hours are also left
	// to the flush's own rollup step: a failed recompute below is redone there.
	for _, h := range hours {
		p.dirty[h] = struct{}{}
	}
	if err := a.store.deleteInvalid(ctx, p.id, p.invalid); err != nil {
		return err
	}
	vs := make([]uint64, len(hours))
	for i := range vs {
		vs[i] = version(p)
	}
	if err := a.store.rollUp(ctx, hours, vs, p.invalid); err != nil {
		return err
	}
	a.zombies.Add(float64(n))
	a.logger.Warn("undid click batches written by an aggregator after it lost the partition", "partition", p.id, "batches", n, "hours", len(hours))
	return nil
}

// fenceCheck drops from parts, and from this aggregator, every partition a newer owner has
// claimed since this one did: its batch must not be written.
func (a *Aggregator) fenceCheck(ctx context.Context, parts *[]*partition) error {
	if len(*parts) == 0 {
		return nil
	}
	ids := make([]int32, len(*parts))
	for i, p := range *parts {
		ids[i] = p.id
	}
	epochs, err := a.store.maxEpochs(ctx, ids)
	if err != nil {
		return err
	}
	kept := (*parts)[:0]
	for _, p := range *parts {
		if e := epochs[p.id]; e > p.epoch {
			a.fenced.Inc()
			a.logger.Warn("click partition claimed by a newer owner; its pending batch is dropped", "partition", p.id, "epoch", p.epoch, "newest_epoch", e)
			delete(a.parts, p.id)
			continue
		}
		kept = append(kept, p)
	}
	*parts = kept
	return nil
}

// retry runs a flush step until it succeeds or ctx ends (package writes).
func (a *Aggregator) retry(ctx context.Context, what string, fn func() error) error {
	return a.writes.Do(ctx, what, fn)
}

// Check reports an error, for readiness, while the click path's ClickHouse steps keep failing
// (package writes).
func (a *Aggregator) Check(ctx context.Context) error { return a.writes.Check(ctx) }
