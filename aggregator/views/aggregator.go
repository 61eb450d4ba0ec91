package views

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/aggregator/engine"
	"github.com/tallypipeline/tally/aggregator/flushpace"
	"github.com/tallypipeline/tally/platform/fence"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/viewerhours"
)

// Config tunes aggregation.
type Config struct {
	Window        time.Duration // dedupe window
	Grace         time.Duration // how late a view is still deduplicated against full state
	FlushInterval time.Duration
	// SketchInterval is how often the viewers added to the sketches are written (as sketch
	// deltas, with each sketch's estimate). Dashboards read unique viewers less eagerly than
	// views, so it is a multiple of FlushInterval.
	SketchInterval time.Duration
	// FoldInterval is how long a fold cycle takes: every sketch with deltas has its whole
	// version rewritten into unique_viewers once per cycle, a share of them at each sketch
	// interval. Zero means 10 minutes.
	FoldInterval time.Duration
	// RollupInterval is how often the batches written since are added to the rollups, in one
	// statement, the first time at half of it (zero: at every flush). Counts are read from
	// Redis, applied at every flush; the rollups serve series and dashboards, which may lag by
	// this much.
	RollupInterval time.Duration
	MaxBatch       int // records of one partition before an early flush
	// ClaimWorkers is how many partitions of one assignment are claimed at once (package
	// engine; 0: its default).
	ClaimWorkers int
	SketchIdle   time.Duration // clean sketches untouched this long leave memory
	// DeltasTTL is view_deltas' retention: rollup buckets are repaired only where the deltas
	// still hold them whole. Zero means the default, 7 days.
	DeltasTTL time.Duration
	// Owner names this aggregator in its partition claims (logs and debugging only).
	Owner string
	// Totals, when set, receives every item's views and unique-viewer estimate, for reads.
	Totals *totals.Store
	// Counted, when set, receives every batch's deduplicated counts, for topk.
	Counted counted.Topic
}

// Aggregator is the view stream's rule set on its partition engine (package engine), which it
// embeds: Assign, Process, Flush and the rest of the lifecycle are the engine's.
type Aggregator struct {
	*engine.Engine[*partition]
	cfg    Config
	store  store
	claims fence.Table
	deltas fence.Batches
	now    func() time.Time
	logger *slog.Logger

	tot *totals.Store
	// partitions is the views topic's partition count, to map items to partitions when
	// rebuilding Redis; set by the member before the first assignment.
	partitions atomic.Int32

	// The periodic work a flush carries besides its batch, each in its own slot: the sketch
	// deltas at whole sketch intervals, the rollups and the checks (zombies, folds, Redis
	// totals) half an interval later, so that no one flush, and no batch consumed while it
	// runs, waits for all of it.
	sketchSlot, rollupSlot, checkSlot *flushpace.Slot
	// sketching is the sketch write under way beside the consume loop, if any (writeSketches).
	sketching *sketchWrite

	m metrics
}

type metrics struct {
	flushSteps         *prometheus.HistogramVec
	readableSeconds    prometheus.Histogram
	sketchSeconds      prometheus.Histogram
	foldSeconds        prometheus.Histogram
	folds              prometheus.Counter
	repairs, zombies   prometheus.Counter
	totalsErrors       prometheus.Counter
	epochDisagreements prometheus.Counter
	repairsRefused     prometheus.Counter
	countedErrors      prometheus.Counter
	pairs              prometheus.GaugeFunc
}

// New returns an aggregator writing through conn.
func New(cfg Config, conn driver.Conn, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Aggregator {
	a := &Aggregator{cfg: cfg, store: store{conn: conn, dead: deadletter.New(now, logger, reg, schemas.TopicViews, sourceUniqueViewers, sourceUniqueViewerDeltas)}, tot: cfg.Totals, now: now, logger: logger,
		claims: fence.Table{Conn: conn, Name: "partition_claims", Starts: []string{"start_offset"}, Ends: viewColumns},
		deltas: fence.Batches{Conn: conn, Table: "view_deltas", Marker: "item_id = ''", Ends: viewColumns}}
	t0 := now()
	a.sketchSlot = flushpace.NewSlot(cfg.SketchInterval, t0.Add(cfg.SketchInterval))
	a.rollupSlot = flushpace.NewSlot(cfg.RollupInterval, t0.Add(cfg.RollupInterval/2))
	a.checkSlot = flushpace.NewSlot(cfg.SketchInterval, t0.Add(cfg.SketchInterval/2))
	a.m = metrics{
		flushSteps: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tally_views_flush_step_seconds",
			Help:    "Time of each step of a flush that ran it, in the consume loop (its rate by step is the share of the loop's time each takes): the batch's statements, its Redis and counted-topic updates, the periodic work.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"step"}),
		readableSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_views_readable_seconds",
			Help:    "Per flush, the time from the previous flush's start until this flush's batch is readable in Redis: the longest a view consumed into it waited in the aggregator.",
			Buckets: prometheus.ExponentialBuckets(0.05, 1.5, 16)}),
		sketchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_views_sketch_write_seconds", Help: "Time of a whole sketch write, from loading and encoding in the consume loop (its share is the sketch_deltas step of tally_views_flush_step_seconds) to the deltas, checkpoints and Redis unique estimates stored beside the loop.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		foldSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_views_sketch_fold_seconds", Help: "Time to fold one sketch interval's share of whole sketches into unique_viewers.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
		folds: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_sketch_folds_total", Help: "Whole unique-viewer sketches rewritten from their deltas."}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_rollup_repairs_total",
			Help: "Rollup repairs run: batches whose rollup writes could not be vouched for (crash, unknown outcome), compared with the deltas and corrected."}),
		zombies: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_zombie_batches_total",
			Help: "Batches written by an aggregator after it had lost the partition, found and undone."}),
		totalsErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_totals_errors_total",
			Help: "Failed attempts to bring the Redis item totals up to the ClickHouse checkpoint (retried at the next flush)."}),
		countedErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_counted_errors_total",
			Help: "Failed attempts to bring the counted topic (topk's input) up to the ClickHouse checkpoint (retried at the next flush)."}),
		epochDisagreements: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_epoch_disagreements_total",
			Help: "Partition claims, or Redis totals catch-ups, that found a newer epoch in another store (view_deltas, batch_items, the Redis guard, the counted topic) than in partition_claims, which lost rows: the claim took an epoch above all, and the partition's Redis totals were rebuilt from ClickHouse."}),
		repairsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_views_rollup_repairs_refused_total",
			Help: "Rollup buckets a repair left as they were although they differ from the deltas, because view_deltas lost batches of their items (dropped or truncated): the deltas no longer hold those buckets whole. Counted at every repair run that leaves them."}),
	}
	a.m.pairs = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_views_dedupe_pairs", Help: "Live (viewer, item) pairs held by the dedupe windows."}, func() float64 {
		n := 0
		a.Each(func(p *partition) { n += p.win.Len() })
		return float64(n)
	})
	reg.MustRegister(a.m.flushSteps, a.m.readableSeconds, a.m.sketchSeconds, a.m.foldSeconds, a.m.folds, a.m.pairs,
		a.m.repairs, a.m.zombies, a.m.totalsErrors, a.m.countedErrors, a.m.epochDisagreements, a.m.repairsRefused)
	a.Engine = engine.New(engine.Config{Stream: "views", Metrics: engine.Names{Records: "tally_views_records_total", Counted: "tally_views_counted_total", SetAside: "tally_views_undecodable_total",
		FlushSeconds: "tally_views_flush_seconds", FlushErrors: "tally_views_flush_errors_total", Fenced: "tally_views_fenced_partitions_total", Lag: "tally_views_flush_lag_seconds",
		ClaimSeconds: "tally_views_claim_seconds"},
		Claims: a.claims, FlushInterval: cfg.FlushInterval, MaxBatch: cfg.MaxBatch, ClaimWorkers: cfg.ClaimWorkers,
		Conn: conn, Now: now, Logger: logger, Registry: reg}, engine.Rules[*partition](a))
	return a
}

// SetPartitions records the views topic's partition count (needed to rebuild Redis totals).
func (a *Aggregator) SetPartitions(n int) { a.partitions.Store(int32(n)) }

// Claim claims partition id, loads its state, repairs what the previous owner may have left
// half written, and, when it has a checkpoint in ClickHouse, says where it resumes: the lower of
// its deltas and sketch checkpoints, and how far it has counted (the higher). A partition
// without one resumes where its claim starts (fence.Claim.ResumesAtStart), or, at its first
// claim, where Kafka's committed offset says.
//
// The claims are read first, the checkpoint from the batches their fence leaves valid, and the
// claim is recorded unless another claimant took its epoch meanwhile (fence.Table.Acquire).
func (a *Aggregator) Claim(ctx context.Context, id int32) (*partition, engine.Start, error) {
	t0 := time.Now()
	var (
		cp checkpoint
		ep newClaimEpoch
	)
	f, c, err := a.claims.Acquire(ctx, id, a.cfg.Owner, func(f fence.Fence) (c fence.Claim, err error) {
		if cp, err = a.store.loadCheckpoint(ctx, id, f); err != nil {
			return c, err
		}
		if ep, err = a.newEpoch(ctx, id, f, cp); err != nil {
			return c, err
		}
		start, err := a.claimStart(ctx, id, f, cp)
		return fence.Claim{Epoch: ep.epoch, Start: []int64{start}, At: a.now()}, err
	})
	if err != nil {
		return nil, engine.Start{}, err
	}
	prev := int64(-1) // where the previous owner started: zombies of older epochs wrote after it
	if last, ok := f.Last(); ok {
		prev = last.Start[0]
	}
	start := c.Start[0]
	p, err := a.load(ctx, id, c, f, cp, ep)
	if err != nil {
		return nil, engine.Start{}, err
	}
	p.start = start
	if err := a.reconcile(ctx, map[*partition]int64{p: p.fence.Lookback(c.At.Add(-zombieLookback), prev)}); err != nil {
		return nil, engine.Start{}, err
	}
	pairs := 0
	var at engine.Start
	switch {
	case cp.found:
		p.win.Restore(cp.watermark)
		if pairs, err = a.store.loadDedupe(ctx, id, cp.end, p.win); err != nil {
			return nil, engine.Start{}, err
		}
		at.At = map[string]int64{schemas.TopicViews: p.next}
		at.Counted = map[string]int64{schemas.TopicViews: max(p.flushed, p.sketched)}
	case c.ResumesAtStart():
		at.At = map[string]int64{schemas.TopicViews: start}
	}
	p.lastEvict = a.now()
	a.logger.Info("partition assigned", "partition", id, "epoch", c.Epoch, "checkpoint", cp.end, "sketch_checkpoint", cp.sketched,
		"fold_checkpoint", cp.folded, "unfolded_sketches", len(p.foldQueue),
		"found", cp.found, "dedupe_pairs", pairs, "took", time.Since(t0).Round(time.Millisecond))
	return p, at, nil
}

// load builds the state of partition id claimed by c, from its checkpoint cp. The first fold
// cycle folds what earlier owners left unfolded: the deltas up to the sketch checkpoint (none of
// theirs lies above it that this owner does not replay).
func (a *Aggregator) load(ctx context.Context, id int32, c fence.Claim, f fence.Fence, cp checkpoint, ep newClaimEpoch) (*partition, error) {
	p := newPartition(id, a.cfg.Window, a.cfg.Grace, cp.end, cp.sketched)
	p.epoch, p.rolled = c.Epoch, cp.rolled
	p.redisStale, p.countedLast = ep.disagree, ep.counted
	unfolded, err := a.store.loadUnfolded(ctx, id, cp.folded)
	if err != nil {
		return nil, err
	}
	p.folded = cp.folded
	p.startFold(cp.sketched, unfolded, a.foldRounds())
	if len(unfolded) > 0 {
		p.inherited = make(map[sketchKey]bool, len(unfolded))
		for _, k := range unfolded {
			p.inherited[k] = true
		}
	}
	p.fence = f.With(c)
	return p, nil
}

// Claimed brings the Redis totals and the counted topic of the partitions of one assignment up
// to their checkpoints. Redis being down must not hold the assignment: the flushes catch up
// later.
func (a *Aggregator) Claimed(ctx context.Context, ps []*partition) {
	if a.tot != nil && len(ps) > 0 {
		if err := a.catchUpTotals(ctx, ps); err != nil {
			a.m.totalsErrors.Inc()
			a.logger.Warn("bring redis totals up to the checkpoint; retrying at the next flush", "err", err)
		}
	}
	a.catchUpCounted(ctx, ps)
}

// newClaimEpoch is the epoch a new claim takes, whether the stores disagreed about the newest
// one, and the counted topic's last batch of the partition if it was read (for the counted
// catch-up that follows, so that it is not read twice).
type newClaimEpoch struct {
	epoch    uint64
	disagree bool
	counted  *countedLast
}

// newEpoch returns the epoch of a new claim of partition id: one above every epoch any store
// holds of it. partition_claims alone is not enough: when its rows are lost (the table
// truncated, or dropped and re-created by the schema check) while view_deltas, batch_items,
// Redis's guard or the counted topic keep newer epochs, a claim at its maximum + 1 would be
// older than those: Redis's guard and topk would refuse every batch of the new owner, while the
// ready marker stays and readers are served stale totals for good. When the stores disagree,
// Redis's totals of the partition are rebuilt from ClickHouse (redisStale): whatever made
// partition_claims lose rows may have taken more with it. A store that cannot be read now
// (Redis, the counted topic) is left out; a Redis guard found newer later is handled when the
// totals catch up (catchUpTotals).
func (a *Aggregator) newEpoch(ctx context.Context, id int32, f fence.Fence, cp checkpoint) (newClaimEpoch, error) {
	items, err := a.store.newestBatchEpoch(ctx, id)
	if err != nil {
		return newClaimEpoch{}, err
	}
	held := map[string]uint64{"view_deltas": cp.epoch, "batch_items": items}
	var out newClaimEpoch
	if a.tot != nil {
		if g, err := a.tot.Guard(ctx, id); err != nil {
			a.logger.Warn("read the redis totals guard for the partition's epoch; checked again when the totals catch up", "partition", id, "err", err)
		} else {
			if g.Found {
				held["redis_guard"] = g.Epoch
			}
			if g.Pending > 0 {
				held["redis_rebuild"] = g.Pending // whose mark fences every older rebuild
			}
		}
	}
	if a.cfg.Counted != nil {
		if last, found, err := a.cfg.Counted.Last(ctx, schemas.CountItems, id); err != nil {
			a.logger.Warn("read the counted topic's last batch for the partition's epoch", "partition", id, "err", err)
		} else {
			out.counted = &countedLast{last, found}
			if found {
				held["counted_topic"] = last.Epoch
			}
		}
	}
	claims := f.MaxEpoch()
	top := claims
	for _, e := range held {
		top = max(top, e)
	}
	out.epoch, out.disagree = top+1, top > claims
	if out.disagree {
		a.m.epochDisagreements.Inc()
		attrs := []any{"partition", id, "partition_claims", claims}
		for _, k := range slices.Sorted(maps.Keys(held)) {
			attrs = append(attrs, k, held[k])
		}
		a.logger.Warn("partition_claims holds an older newest epoch than other stores (its rows were lost: truncated, or dropped and re-created); claiming above every one, and rebuilding the partition's redis totals from clickhouse",
			append(attrs, "epoch", out.epoch)...)
	}
	return out, nil
}

// claimStart is the start a new claim of partition id records: the checkpoint it resumes from.
// Without one (no marker of the partition in view_deltas) that is 0, and every batch of an older
// epoch is then beyond the claim's start: a zombie's (package fence), whose buckets the new owner sets
// to the deltas and whose deltas it deletes. When batches were written before and their markers
// are gone (view_deltas dropped or truncated; an idle partition's markers expired), that would
// take their views out of the rollups. So when some batch is proven written (a claim started
// after it, a sketch or fold checkpoint valid by the claims passed it, or a later valid batch of
// its epoch exists), the
// start is the highest end offset batch_items lists of a batch valid by the claims so far: every
// such batch stays valid, and those whose deltas are gone are found lost (lostBatches) rather
// than undone. Consumption resumes at that start: records beyond it are in no valid batch. A
// listed batch whose deltas never landed (its owner died between the two writes) is skipped
// then: with the markers gone, nothing tells it from one whose deltas the table lost.
func (a *Aggregator) claimStart(ctx context.Context, id int32, f fence.Fence, cp checkpoint) (int64, error) {
	if cp.found {
		return cp.end, nil
	}
	itemsEnd, written, err := a.store.history(ctx, id, f.AnyInvalidSQL())
	if err != nil {
		return 0, err
	}
	proven := max(written, cp.vouched)
	for _, c := range f.Claims() {
		proven = max(proven, c.Start[0])
	}
	if proven <= 0 {
		return cp.end, nil // a new partition, or one whose first batch never reached view_deltas
	}
	start := max(proven, itemsEnd)
	a.logger.Warn("view_deltas holds no checkpoint of the partition, yet batches were written before (the table dropped or truncated, or an idle partition's markers expired): resuming after the last batch listed, and the batches listed before count as valid",
		"partition", id, "proven_written_to", proven, "claim_start", start)
	return start, nil
}

// zombieLookback is how far back in claims an owner looks for zombies' batches: a statement whose
// check of the claims (inside the statement) ran before a claim but whose rows committed after it
// (a ClickHouse server runs statements concurrently) is found as long as it commits within this
// of the claim it raced, even when the owners of the claims since then all died before looking.
const zombieLookback = 10 * time.Minute

// zombieRecheck is how long a zombie's undone batch is undone again at every check: the rest of
// the zombie's flush (a few statements) lands within it unless the zombie stalls once more.
const zombieRecheck = time.Minute

// reconcile makes each partition of after's rollups hold exactly its valid batches: one
// statement finds the batches of zombies that ended after each partition's offset in after (the
// check runs at every sketch interval, nearly always finds nothing, and each statement has a
// fixed cost), then each partition is reconciled with its own (reconcileWith).
func (a *Aggregator) reconcile(ctx context.Context, after map[*partition]int64) error {
	found, err := a.store.zombieBatches(ctx, after)
	if err != nil {
		return err
	}
	for p := range after {
		if err := a.reconcileWith(ctx, p, found[p.id]); err != nil {
			return err
		}
	}
	return nil
}

// deleteZombieDeltas deletes the deltas of p's zombie batches zs that are stored, and reports
// whether there were any. A batch's deltas land with its marker in one INSERT, so a batch whose
// marker is gone (undone at an earlier check, or dropped by its statement) has no rows left:
// looking for the markers reads the few rows at the head of the sort key, where a DELETE, even
// one that matches nothing, is a mutation costing the engine about a second, at every recheck
// of every zombie batch. The rollups were corrected before, so no reader sees the batches
// counted once they are gone.
func (a *Aggregator) deleteZombieDeltas(ctx context.Context, p *partition, zs []batchRef) (bool, error) {
	terms := make([]string, len(zs))
	for i, b := range zs {
		terms[i] = b.sql()
	}
	cond := strings.Join(terms, " OR ")
	stored, err := a.deltas.Invalid(ctx, map[int32]string{p.id: cond})
	if err != nil || stored[p.id] == 0 {
		return false, err
	}
	return true, a.deltas.Delete(ctx, p.id, cond)
}

// reconcileWith repairs the rollups of every item of the zombies' batches zs and of the
// batches after p.rolled, then deletes the zombies' deltas. Every step compares before it
// writes, so a crash anywhere in it is repaired by running it again.
func (a *Aggregator) reconcileWith(ctx context.Context, p *partition, zs []batchRef) error {
	var err error
	// A zombie may still be sending the rest of its flush (its rollup INSERTs) after its batch
	// was undone, so an undone batch is undone again, to no effect once it is complete, for
	// zombieRecheck.
	now := a.now()
	zs = slices.DeleteFunc(zs, func(b batchRef) bool {
		at, ok := p.undone[b]
		return ok && now.Sub(at) > zombieRecheck
	})
	if p.rolled >= p.flushed && len(zs) == 0 {
		return nil
	}
	var items []string
	if p.rolled < 0 {
		items, err = a.store.legacyItems(ctx, p.id)
	} else {
		items, err = a.store.itemsOf(ctx, p.id, p.rolled, p.flushed, zs)
	}
	if err != nil {
		return err
	}
	ttl := a.cfg.DeltasTTL
	if ttl <= 0 {
		ttl = 7 * 24 * time.Hour
	}
	horizon := a.now().Add(-ttl + time.Hour)
	invalid := p.fence.InvalidSQL()
	// Only items whose deltas are complete are repaired: view_deltas that lost batches (dropped
	// and re-created, or truncated) would have their views taken out of the rollups.
	lost, err := a.store.lostBatches(ctx, p, items, a.now().Add(-ttl+markerSlack))
	if err != nil {
		return err
	}
	repair := items
	if len(lost) > 0 {
		repair = slices.DeleteFunc(slices.Clone(items), func(it string) bool { return lost[it] != nil })
		if err := a.refuseRepair(ctx, p, lost, invalid, horizon); err != nil {
			return err
		}
	}
	if err := a.store.repairRollups(ctx, p.id, p.epoch, repair, invalid, horizon); err != nil {
		return err
	}
	a.m.repairs.Inc()
	a.logger.Info("rollups repaired", "partition", p.id, "from", p.rolled, "to", p.flushed, "items", len(items), "zombie_batches", len(zs))
	// Before the totals are corrected, which may rebuild them from the rollups.
	p.rolledAll()
	if len(zs) > 0 {
		deleted, err := a.deleteZombieDeltas(ctx, p, zs)
		if err != nil {
			return err
		}
		first := false // a batch undone for the first time
		for _, b := range zs {
			if _, ok := p.undone[b]; !ok {
				p.undone[b] = now
				a.m.zombies.Inc()
				first = true
			}
		}
		if err := a.fixTotals(ctx, p, items); err != nil {
			a.m.totalsErrors.Inc()
			a.logger.Warn("correct redis totals after undoing zombie batches", "partition", p.id, "err", err)
		}
		if first || deleted {
			a.logger.Warn("undid batches written by an aggregator after it lost the partition", "partition", p.id,
				"batches", fmt.Sprint(zs), "items", len(items))
		}
	}
	return nil
}

// markerSlack is how much later than the deltas' TTL a batch must have been written for its
// marker (stamped with the batch's write time) to be surely still there, whatever the skew
// between this clock and the ClickHouse server's. A batch written earlier holds no view in a
// bucket a repair compares (from an hour inside the TTL) unless its view was stamped more than
// 50 minutes ahead of the time it was counted, which the collector refuses
// (collector.future_bound, 5 minutes).
const markerSlack = 10 * time.Minute

// refuseRepair logs and counts the rollup buckets of the items of lost (item -> its batches
// missing from view_deltas) that differ from the deltas, which the repair leaves as they are:
// the deltas no longer hold every batch that went into them, so the rollup, not the deltas, may
// be right, and setting it to the deltas would take views away without a trace.
func (a *Aggregator) refuseRepair(ctx context.Context, p *partition, lost map[string][]batchRef, invalid string, horizon time.Time) error {
	items := slices.Sorted(maps.Keys(lost))
	diffs, err := a.store.rollupDiffs(ctx, p.id, items, invalid, horizon)
	if err != nil {
		return err
	}
	a.m.repairsRefused.Add(float64(len(diffs)))
	batches := map[batchRef]bool{}
	for _, bs := range lost {
		for _, b := range bs {
			batches[b] = true
		}
	}
	missing := slices.SortedFunc(maps.Keys(batches), func(x, y batchRef) int { return cmp.Compare(x.end, y.end) })
	const shown = 20
	a.logger.Error("rollup repair refused for items whose batches view_deltas lost (the table dropped and re-created, or truncated): their buckets are left as they are, and may lack or keep views the deltas cannot tell",
		"partition", p.id, "items", len(items), "missing_batches", len(missing), "first_missing", joinShown(missing, shown),
		"buckets_differing", len(diffs), "first_differing", joinShown(diffs, shown))
	return nil
}

// joinShown is the first n of vs, for a log line, separated by "; ".
func joinShown[T fmt.Stringer](vs []T, n int) string {
	out := make([]string, 0, min(n, len(vs)))
	for _, v := range vs[:min(n, len(vs))] {
		out = append(out, v.String())
	}
	return strings.Join(out, "; ")
}

// Apply applies records of the views topic to partition p, in offset order.
func (a *Aggregator) Apply(p *partition, _ string, recs []*kgo.Record) engine.Applied {
	now := a.now()
	counted0, edge0, poison0 := p.counted.len(), p.edgeViews, p.poison
	n := 0
	for _, r := range recs {
		if r.Offset < p.next {
			continue
		}
		p.process(r.Offset, r.Value, now)
		n++
	}
	return engine.Applied{Records: n, Counted: p.counted.len() - counted0 + int(p.edgeViews-edge0), SetAside: p.poison - poison0}
}

// writeRollups adds the batches written since each held partition's rollups were last written
// (those of only, when set) to the rollups: from memory in one statement, or, for a partition
// whose batches are not all in memory or when that statement fails, repaired from the deltas.
// A partition that a newer owner claimed meanwhile writes nothing (the statement's fence) and is
// dropped at its next claims check.
func (a *Aggregator) writeRollups(ctx context.Context, only map[int32]bool) error {
	var roll, repair []*partition
	for _, p := range a.Held(only) {
		if p.rolled >= p.flushed {
			continue
		}
		if p.rollupsLost {
			repair = append(repair, p)
		} else {
			roll = append(roll, p)
		}
	}
	if len(roll) > 0 {
		if err := a.store.writeRollups(ctx, roll); err != nil {
			// Part of the statement may have landed (its materialized views write table by
			// table): from now on these batches are repaired, which compares before it writes,
			// never written from memory again, which would count that part twice.
			a.logger.Warn("write rollups failed; repairing them from the deltas", "err", err)
			for _, p := range roll {
				p.rollupsLost = true
			}
			repair = append(repair, roll...)
		} else {
			for _, p := range roll {
				p.rolledAll()
			}
		}
	}
	if len(repair) == 0 {
		return nil
	}
	after := make(map[*partition]int64, len(repair))
	for _, p := range repair {
		after[p] = p.zombiesFrom(a.now())
	}
	return a.Retry(ctx, "repair rollups", func() error { return a.reconcile(ctx, after) })
}

// sketchWrite is a write of sketch deltas and their checkpoints under way beside the consume
// loop. Its goroutine reads only what writeSketches prepared and closes done when it ends; the
// aggregator reads err and applies the outcome after that (settleSketches).
type sketchWrite struct {
	parts []*partition
	ends  []offsetRow // parallel to parts
	taken [][]takenDelta
	hours []map[hourKey]*viewerhours.Hour
	done  chan struct{}
	err   error
}

// writeSketches starts writing the hour registers and the deltas of the dirty sketches of parts,
// then their sketch checkpoints, beside the consume loop. The order matters: a checkpoint only
// ever vouches for sketches already stored. The rows are built here, under the lock, and the sketches left
// clean; the partitions' sketch checkpoints in memory move when settleSketches finds the write
// done. A final write (the partitions leave this owner) computes every estimate owed.
//
// The write is the largest of the periodic ones, and the engine runs one statement at a time:
// run in the loop, it held the batches consumed meanwhile for all of it; beside the loop, a
// flush waits at most for the statement under way.
func (a *Aggregator) writeSketches(ctx context.Context, parts []*partition, now time.Time, final bool) error {
	// A displaced owner's deltas are dropped by ClickHouse (migration 012); the flush's claims
	// checks also keep their estimates out of Redis in all but a stall between check and write.
	parts = slices.DeleteFunc(parts, func(p *partition) bool { return !a.Holds(p) })
	if len(parts) == 0 {
		return nil
	}
	t0 := time.Now()
	if err := a.Retry(ctx, "load sketches", func() error { return a.store.loadSketches(ctx, parts) }); err != nil {
		return err
	}
	rows, est := sketchDeltaRows(parts, now, final)
	w := &sketchWrite{parts: parts, done: make(chan struct{})}
	for _, p := range parts {
		w.ends = append(w.ends, offsetRow{p.id, p.epoch, p.next})
		w.taken = append(w.taken, p.takeDeltas(now, a.cfg.SketchIdle))
		w.hours = append(w.hours, p.takeHours())
	}
	a.sketching = w
	// The goroutine records its progress at the flush's time rather than call the clock beside
	// the loop.
	at := func() time.Time { return now }
	go func() {
		defer close(w.done)
		// Retried apart, so that a failed checkpoint insert (one row per partition) does not
		// write every delta again.
		if w.err = a.RetryAt(ctx, "write unique viewers by hour", at, func() error { return a.store.insertHours(ctx, w.hours) }); w.err != nil {
			return
		}
		if w.err = a.RetryAt(ctx, "write sketch deltas", at, func() error { return a.store.insertSketchDeltas(ctx, rows, now) }); w.err != nil {
			return
		}
		if w.err = a.RetryAt(ctx, "write sketch checkpoints", at, func() error { return a.store.writeSketchCheckpoints(ctx, w.ends, now) }); w.err != nil {
			return
		}
		a.setUnique(ctx, est)
		a.m.sketchSeconds.Observe(time.Since(t0).Seconds())
	}()
	return nil
}

// settleSketches applies the outcome of the sketch write under way once it is done, waiting for
// it when wait is set: the sketch checkpoints of the partitions still held move or, if it failed
// (its retries end only with the context of the flush that started it, as at a stop), its
// deltas are given back for the next write to hold.
func (a *Aggregator) settleSketches(wait bool) error {
	w := a.sketching
	if w == nil {
		return nil
	}
	if wait {
		<-w.done
	} else {
		select {
		case <-w.done:
		default:
			return nil
		}
	}
	a.sketching = nil
	if w.err != nil {
		a.logger.Warn("sketch write beside the consume loop failed; the next one holds its deltas", "err", w.err)
	}
	for i, p := range w.parts {
		if w.err != nil {
			p.restoreHours(w.hours[i])
			if err := p.restoreDeltas(w.taken[i]); err != nil {
				return err
			}
			continue
		}
		if a.Holds(p) {
			p.sketched = w.ends[i].end
		}
	}
	return nil
}

// setUnique writes the all-time unique-viewer estimates of items to Redis. Estimates only grow
// and a replay writes the same or larger ones: no guard needed.
func (a *Aggregator) setUnique(ctx context.Context, est map[string]uint64) {
	if a.tot == nil || len(est) == 0 {
		return
	}
	if err := a.tot.SetUnique(ctx, est); err != nil {
		a.m.totalsErrors.Inc()
		a.logger.Warn("write unique-viewer estimates to redis", "err", err)
	}
}

// foldRounds is how many sketch intervals a fold cycle is spread over.
func (a *Aggregator) foldRounds() int {
	fold := a.cfg.FoldInterval
	if fold == 0 {
		fold = 10 * time.Minute
	}
	if a.cfg.SketchInterval <= 0 {
		return 1
	}
	return max(1, int(fold/a.cfg.SketchInterval))
}

// foldSketches rewrites this sketch interval's share of every held partition's fold cycle into
// unique_viewers, then the fold checkpoints of the partitions whose cycle is complete. A key
// queued but no longer in memory (an earlier owner's delta) is loaded from its stored version
// first. A whole sketch written again after a crash is the same or a larger one.
func (a *Aggregator) foldSketches(ctx context.Context, now time.Time) error {
	folds := map[*partition][]sketchKey{}
	var done []*partition
	n := 0
	for _, p := range a.Held(nil) {
		keys := p.foldTake(a.foldRounds())
		for _, k := range keys {
			p.sketch(k) // an earlier owner's key: loaded from its stored version below
		}
		if len(keys) > 0 {
			folds[p] = keys
			n += len(keys)
		}
		if p.foldDone() {
			done = append(done, p)
		}
	}
	if len(folds) == 0 && len(done) == 0 {
		return nil
	}
	t0 := time.Now()
	if err := a.Retry(ctx, "fold sketches", func() error {
		if err := a.store.loadSketches(ctx, slices.Collect(maps.Keys(folds))); err != nil {
			return err
		}
		return a.store.writeFolds(ctx, folds, now)
	}); err != nil {
		for p, keys := range folds { // still owed: the cycle must not end without them
			p.foldQueue = append(keys, p.foldQueue...)
		}
		return err
	}
	est := map[string]uint64{}
	for p, keys := range folds {
		for _, k := range keys {
			p.sketches[k].unfolded = false
			if k.day == allTime {
				est[k.item] = p.sketches[k].estimate
			}
		}
	}
	a.m.folds.Add(float64(n))
	a.setUnique(ctx, est)
	if len(done) > 0 {
		sort.Slice(done, func(i, j int) bool { return done[i].id < done[j].id })
		if err := a.Retry(ctx, "write fold checkpoints", func() error {
			return a.store.writeFoldCheckpoints(ctx, done, now)
		}); err != nil {
			return err
		}
		for _, p := range done {
			p.folded, p.inherited = p.foldFrom, nil
		}
	}
	a.m.foldSeconds.Observe(time.Since(t0).Seconds())
	return nil
}
