package clicks

import (
	"context"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	countedtopic "github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/aggregator/engine"
	"github.com/tallypipeline/tally/aggregator/flushpace"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/platform/fence"
	"github.com/tallypipeline/tally/schemas"
)

// Config tunes the click path.
type Config struct {
	Window         time.Duration // a click id counts once within this much event time
	Grace          time.Duration // how late a click is still deduplicated against full state
	FraudThreshold float64       // clicks scored above it are not billable; 1 disables
	FlushInterval  time.Duration
	RollupInterval time.Duration // how often touched hours are recomputed
	MaxBatch       int           // records of one partition before an early flush
	// ClaimWorkers is how many partitions of one assignment are claimed at once (package
	// engine; 0: its default).
	ClaimWorkers int
	// VerdictHold is how long, in click event time, a verdict stays in memory to meet clicks of
	// its id that arrive after it (a repeat counted again); at least Window + Grace. Match it
	// to the counted clicks' retention.
	VerdictHold time.Duration
	Owner       string // names this aggregator in its claims (logs and debugging)
	// Counted, when set, receives every batch's deduplicated click counts (kind ads), for topk.
	Counted countedtopic.Topic
}

// Aggregator is the click stream's rule set on its partition engine (package engine), which it
// embeds: Assign, Process, Flush and the rest of the lifecycle are the engine's.
type Aggregator struct {
	*engine.Engine[*partition]
	cfg    Config
	store  store
	claims fence.Table
	deltas fence.Batches
	dead   *deadletter.Writer
	now    func() time.Time
	logger *slog.Logger

	rollupSlot *flushpace.Slot // the flushes that write the rollups

	verdicts      prometheus.Counter
	zombies       prometheus.Counter
	countedErrors prometheus.Counter
}

// New returns an aggregator writing through conn.
func New(cfg Config, conn driver.Conn, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Aggregator {
	a := &Aggregator{cfg: cfg, store: store{conn}, now: now, logger: logger, rollupSlot: flushpace.NewSlot(cfg.RollupInterval, now().Add(cfg.RollupInterval)),
		claims:   fence.Table{Conn: conn, Name: "click_partition_claims", Starts: []string{"start_clicks", "start_verdicts"}, Ends: clickColumns},
		deltas:   fence.Batches{Conn: conn, Table: "click_deltas", Marker: "ad_id = ''", Ends: clickColumns},
		dead:     deadletter.New(now, logger, reg, schemas.TopicClicks, schemas.TopicFraudVerdicts),
		verdicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_verdicts_total", Help: "Fraud verdicts resolved against counted clicks."}),
		zombies:  prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_zombie_batches_total", Help: "Click batches written by an aggregator after it had lost the partition, found and undone."}),
		countedErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_clicks_counted_errors_total",
			Help: "Failed attempts to bring the counted topic (topk's input) up to the click checkpoint (retried at the next flush)."}),
	}
	steps := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tally_clicks_step_seconds", Help: "Time of each ClickHouse step of a click flush, retries included.",
		Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}, []string{"step"})
	reg.MustRegister(a.verdicts, steps, a.zombies, a.countedErrors)
	a.Engine = engine.New(engine.Config{Stream: "clicks", Metrics: engine.Names{Records: "tally_clicks_records_total", Counted: "tally_clicks_counted_total", SetAside: "tally_clicks_undecodable_total",
		FlushSeconds: "tally_clicks_flush_seconds", FlushErrors: "tally_clicks_flush_errors_total", Fenced: "tally_clicks_fenced_partitions_total", Lag: "tally_clicks_flush_lag_seconds",
		ClaimSeconds: "tally_clicks_claim_seconds"},
		Claims: a.claims, FlushInterval: cfg.FlushInterval, MaxBatch: cfg.MaxBatch, ClaimWorkers: cfg.ClaimWorkers,
		StepSeconds: steps, Conn: conn, Now: now, Logger: logger, Registry: reg}, engine.Rules[*partition](a))
	return a
}

// Claim claims partition id, undoes batches written by a previous owner after it lost the
// partition, recomputes the hours the previous owner may not have rolled up, loads the dedupe
// window and the verdict cache, and says where the partition resumes in each topic: at its
// checkpoint, or without one where its claim starts (fence.Claim.ResumesAtStart), or at its
// first claim where Kafka's committed offset says.
func (a *Aggregator) Claim(ctx context.Context, id int32) (*partition, engine.Start, error) {
	t0 := time.Now()
	var hours []hourKey
	cp, c, invalid, err := fence.Open(ctx, a.claims, a.deltas, id, a.cfg.Owner, a.now, func(invalid string) (checkpoint, []int64, error) {
		cp, err := a.store.loadCheckpoint(ctx, id, invalid)
		return cp, []int64{cp.at.clicks, cp.at.verdicts}, err
	}, func(cp checkpoint, invalid string) (err error) {
		hours, err = a.store.hoursAfter(ctx, id, cp.rolled, invalid) // the zombies' hours too, before their deltas go
		return err
	})
	if err != nil {
		return nil, engine.Start{}, err
	}
	p := newPartition(id, a.cfg.Window.Milliseconds(), a.cfg.Grace.Milliseconds(), a.cfg.VerdictHold.Milliseconds(), a.cfg.FraudThreshold)
	p.epoch, p.next, p.flushed, p.invalid = c.Epoch, cp.at, cp.at, invalid
	vs := make([]uint64, len(hours))
	for i := range vs {
		vs[i] = version(p)
	}
	if err := a.store.rollUp(ctx, hours, vs, invalid); err != nil {
		return nil, engine.Start{}, err
	}
	p.rolled = cp.at
	var start engine.Start
	if cp.found {
		p.win.Restore(cp.watermark)
		if err := a.store.loadDedupe(ctx, id, cp.at, p.win); err != nil {
			return nil, engine.Start{}, err
		}
		if p.latest, err = a.store.loadVerdicts(ctx, id, cp.at, nil, cp.watermark-p.hold); err != nil {
			return nil, engine.Start{}, err
		}
	}
	if cp.found || c.ResumesAtStart() {
		start.At = map[string]int64{schemas.TopicClicks: cp.at.clicks, schemas.TopicFraudVerdicts: cp.at.verdicts}
	}
	a.logger.Info("click partition assigned", "partition", id, "epoch", c.Epoch, "clicks_offset", cp.at.clicks, "verdicts_offset", cp.at.verdicts,
		"found", cp.found, "hours_rolled_up", len(hours), "took", time.Since(t0).Round(time.Millisecond))
	return p, start, nil
}

// Claimed publishes to the counted topic the durable batches of ps it lacks: a new owner cannot
// know what the previous one published. Errors are logged; the partition's next flush tries
// again.
func (a *Aggregator) Claimed(ctx context.Context, ps []*partition) {
	for _, p := range ps {
		a.follow().CatchUp(ctx, a.cfg.Counted, &p.countedEnd, p.id, p.flushed.clicks, a.storedBatches(ctx, p))
	}
}

// version orders hour rollup writes: a newer owner (epoch) beats an older one, and within an
// owner a later checkpoint beats an earlier.
func version(p *partition) uint64 {
	return p.epoch<<40 | uint64(p.flushed.clicks+p.flushed.verdicts)&(1<<40-1)
}

// Apply applies records of one topic to partition p, in offset order.
func (a *Aggregator) Apply(p *partition, topic string, recs []*kgo.Record) engine.Applied {
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
	return engine.Applied{Records: n, Counted: len(p.counted) - counted0, SetAside: p.poison - poison0}
}

// Write writes the batches of the partitions f names, with the rollups of the hours they
// touched when the rollup interval has passed or f.Mode is engine.All. Its steps, in order: set
// refused records aside, resolve the verdicts, write the batch (facts, then the deltas with the
// checkpoint behind the fence), publish it to the counted topic, then the rollups.
func (a *Aggregator) Write(ctx context.Context, f engine.Flush) (member.Offsets, error) {
	withRollups := f.Mode == engine.All || a.rollupSlot.Due(f.Now)
	all := a.Held(f.Only)
	var parts []*partition
	for _, p := range all {
		if p.pending() {
			parts = append(parts, p)
		}
	}
	if err := deadletter.SetAside(ctx, a.dead, a.store.conn, a.Retry, parts, func(p *partition) *[]deadletter.Letter { return &p.dead }); err != nil {
		return nil, err
	}
	if err := a.resolveVerdicts(ctx, parts); err != nil {
		return nil, err
	}
	parts, err := a.writeBatch(ctx, parts, f.Now)
	if err != nil {
		return nil, err
	}
	done := a.publishBatch(ctx, parts)
	if withRollups {
		if err := a.writeRollups(ctx, all, f.Only, f.Now); err != nil {
			return nil, err
		}
	}
	return done, nil
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
		if err := a.Retry(ctx, "look up verdicts' clicks", func() error {
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
// it returns (engine.WriteFenced).
func (a *Aggregator) writeBatch(ctx context.Context, parts []*partition, now time.Time) ([]*partition, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	if err := a.Retry(ctx, "write counted clicks and verdicts", func() error { return a.store.writeFacts(ctx, parts) }); err != nil {
		return nil, err
	}
	err := a.WriteFenced(ctx, "write click deltas", &parts,
		func(p *partition) (bool, error) {
			return a.deltas.Written(ctx, p.id, p.epoch, p.next.clicks, p.next.verdicts)
		},
		func(ps []*partition) error { return a.store.writeDeltas(ctx, ps, now) })
	return parts, err
}

// publishBatch marks the stored batches of parts flushed, publishes each to the counted topic,
// and returns the new checkpoints.
func (a *Aggregator) publishBatch(ctx context.Context, parts []*partition) member.Offsets {
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
	return split(done)
}

// writeRollups rolls up the hours the batches of all touched. A flush of every partition (only
// nil) first undoes the batches of zombies that landed after this owner's claim (their fence
// check passed just before) rather than at the next assignment.
func (a *Aggregator) writeRollups(ctx context.Context, all []*partition, only map[int32]bool, now time.Time) error {
	if only == nil {
		a.rollupSlot.Done(now)
		if err := a.Retry(ctx, "undo zombie batches", func() error { return a.undoZombies(ctx, all) }); err != nil {
			return err
		}
	}
	// One statement for every partition's touched hours: the engine runs one query at a time,
	// and each has a fixed cost.
	var hours []hourKey
	var versions []uint64
	var rolled []*partition
	for _, p := range all {
		if !a.Holds(p) || len(p.dirty) == 0 {
			continue
		}
		for h := range p.dirty {
			hours = append(hours, h)
			versions = append(versions, version(p))
		}
		rolled = append(rolled, p)
	}
	if len(hours) > 0 {
		if err := a.Retry(ctx, "roll up click hours", func() error {
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
	return a.UndoZombies(ctx, a.deltas, parts, func(p *partition) string { return p.invalid }, a.zombies,
		func(p *partition, del func() error) ([]any, error) { return a.recomputeZombieHours(ctx, p, del) })
}

// recomputeZombieHours runs the delete of partition p's zombie deltas (del) between finding the
// hours they touched and recomputing those.
func (a *Aggregator) recomputeZombieHours(ctx context.Context, p *partition, del func() error) ([]any, error) {
	hours, err := a.store.hoursAfter(ctx, p.id, p.flushed, p.invalid)
	if err != nil {
		return nil, err
	}
	// Once the deltas are deleted a retry finds no zombie marker, so the hours are also left
	// to the flush's own rollup step: a failed recompute below is redone there.
	for _, h := range hours {
		p.dirty[h] = struct{}{}
	}
	if err := del(); err != nil {
		return nil, err
	}
	vs := make([]uint64, len(hours))
	for i := range vs {
		vs[i] = version(p)
	}
	if err := a.store.rollUp(ctx, hours, vs, p.invalid); err != nil {
		return nil, err
	}
	return []any{"hours", len(hours)}, nil
}
