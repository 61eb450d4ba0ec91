package counters

import (
	"context"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/aggregator/engine"
	"github.com/tallypipeline/tally/aggregator/flushpace"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/platform/fence"
	"github.com/tallypipeline/tally/schemas"
)

// Config tunes the counter path.
type Config struct {
	FlushInterval time.Duration
	MaxBatch      int // records of one partition before an early flush
	// ClaimWorkers is how many partitions of one assignment are claimed at once (package
	// engine; 0: its default).
	ClaimWorkers  int
	CheckInterval time.Duration // how often held partitions are checked for zombies' late batches
	Owner         string        // names this aggregator in its claims
}

// Aggregator is the counter stream's rule set on its partition engine, which it embeds.
type Aggregator struct {
	*engine.Engine[*partition]
	cfg    Config
	store  store
	claims fence.Table
	deltas fence.Batches
	dead   *deadletter.Writer
	now    func() time.Time
	logger *slog.Logger

	checkSlot *flushpace.Slot // the flushes that look for zombies' batches
	zombies   prometheus.Counter
}

// New returns an aggregator writing through conn.
func New(cfg Config, conn driver.Conn, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Aggregator {
	a := &Aggregator{cfg: cfg, store: store{conn}, now: now, logger: logger, checkSlot: flushpace.NewSlot(cfg.CheckInterval, now().Add(cfg.CheckInterval)),
		claims: counters.Claims(conn),
		deltas: fence.Batches{Conn: conn, Table: "counter_deltas", Marker: "ns = ''", Ends: []string{"end_offset"}},
		dead:   deadletter.New(now, logger, reg, schemas.TopicCounterEvents),
		zombies: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_counters_zombie_batches_total",
			Help: "Counter batches written by an aggregator after it had lost the partition, found and undone."}),
	}
	reg.MustRegister(a.zombies)
	a.Engine = engine.New(engine.Config{Stream: "counters", Metrics: engine.Names{Records: "tally_counters_records_total", Counted: "tally_counters_counted_total", SetAside: "tally_counters_undecodable_total",
		FlushSeconds: "tally_counters_flush_seconds", FlushErrors: "tally_counters_flush_errors_total", Fenced: "tally_counters_fenced_partitions_total", Lag: "tally_counters_flush_lag_seconds",
		ClaimSeconds: "tally_counters_claim_seconds"},
		Claims: a.claims, FlushInterval: cfg.FlushInterval, MaxBatch: cfg.MaxBatch, ClaimWorkers: cfg.ClaimWorkers,
		Conn: conn, Now: now, Logger: logger, Registry: reg}, engine.Rules[*partition](a))
	return a
}

// NewSource joins the counter_events topic's consumer group with agg's engine.
func NewSource(c member.Config, agg *Aggregator) (*member.Source, error) {
	c.Stream, c.Topics = "counters", []string{schemas.TopicCounterEvents}
	return member.NewSource(c, agg.Engine)
}

// Claim claims partition id, deletes the batches of owners that lost it written after their
// claim, and loads the checkpoint and the dedupe state. It resumes at the checkpoint, or without
// one where its claim starts (fence.Claim.ResumesAtStart), or at its first claim where Kafka's
// committed offset says.
func (a *Aggregator) Claim(ctx context.Context, id int32) (*partition, engine.Start, error) {
	t0 := time.Now()
	cp, c, invalid, err := fence.Open(ctx, a.claims, a.deltas, id, a.cfg.Owner, a.now, func(invalid string) (checkpoint, []int64, error) {
		cp, err := a.store.loadCheckpoint(ctx, id, invalid)
		return cp, []int64{cp.end}, err
	}, nil)
	if err != nil {
		return nil, engine.Start{}, err
	}
	p := newPartition(id)
	p.epoch, p.next, p.flushed, p.invalid = c.Epoch, cp.end, cp.end, invalid
	var start engine.Start
	if cp.found {
		if err := a.store.loadDedupe(ctx, p, cp); err != nil {
			return nil, engine.Start{}, err
		}
	}
	if cp.found || c.ResumesAtStart() {
		start.At = map[string]int64{schemas.TopicCounterEvents: cp.end}
	}
	a.logger.Info("counter partition assigned", "partition", id, "epoch", c.Epoch, "checkpoint", cp.end, "found", cp.found,
		"windows", len(p.windows), "took", time.Since(t0).Round(time.Millisecond))
	return p, start, nil
}

// Claimed has nothing to catch up: the counts are read from ClickHouse.
func (a *Aggregator) Claimed(context.Context, []*partition) {}

// Apply applies records of the counter_events topic to partition p, in offset order.
func (a *Aggregator) Apply(p *partition, _ string, recs []*kgo.Record) engine.Applied {
	counted0, poison0, n := p.counted, p.poison, 0
	for _, r := range recs {
		if r.Offset < p.next {
			continue
		}
		p.apply(r.Offset, r.Key, r.Value)
		n++
	}
	return engine.Applied{Records: n, Counted: p.counted - counted0, SetAside: p.poison - poison0}
}

// Write writes the batches of the partitions f names: the refused records' dead letters and the
// counted tokens and the distinct members first (a replay writes them again to no effect), then,
// for the counters a batch
// clears, reads their totals up to the checkpoint, then writes the deltas (a clear's as the
// negated total in its minute) with the checkpoint behind the fence; every CheckInterval, a flush of every partition also undoes
// zombies' batches that landed after this owner's claim.
func (a *Aggregator) Write(ctx context.Context, f engine.Flush) (member.Offsets, error) {
	var parts []*partition
	for _, p := range a.Held(f.Only) {
		if p.pending() {
			parts = append(parts, p)
		}
	}
	if err := deadletter.SetAside(ctx, a.dead, a.store.conn, a.Retry, parts, func(p *partition) *[]deadletter.Letter { return &p.dead }); err != nil {
		return nil, err
	}
	if len(parts) > 0 {
		if err := a.Retry(ctx, "write counter tokens", func() error { return a.store.writeTokens(ctx, parts) }); err != nil {
			return nil, err
		}
		if err := a.Retry(ctx, "write distinct members", func() error { return a.store.writeMembers(ctx, parts) }); err != nil {
			return nil, err
		}
		if err := a.Retry(ctx, "read cleared counters' totals", func() error { return a.readDurable(ctx, parts) }); err != nil {
			return nil, err
		}
	}
	if err := a.WriteFenced(ctx, "write counter deltas", &parts,
		func(p *partition) (bool, error) { return a.deltas.Written(ctx, p.id, p.epoch, p.next) },
		func(ps []*partition) error { return a.store.writeDeltas(ctx, ps, f.Now) }); err != nil {
		return nil, err
	}
	done := map[int32]int64{}
	for _, p := range parts {
		p.markFlushed()
		done[p.id] = p.flushed
	}
	if f.Only == nil && a.checkSlot.Due(f.Now) {
		a.checkSlot.Done(f.Now)
		if err := a.Retry(ctx, "undo zombie counter batches", func() error { return a.undoZombies(ctx, a.Held(nil)) }); err != nil {
			return nil, err
		}
	}
	if len(done) == 0 {
		return nil, nil
	}
	return member.Offsets{schemas.TopicCounterEvents: done}, nil
}

// readDurable reads the totals of the counters the batches of parts clear (store.readDurable).
func (a *Aggregator) readDurable(ctx context.Context, parts []*partition) error {
	for _, p := range parts {
		if err := a.store.readDurable(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// undoZombies deletes the batches the fence makes invalid that landed after their owner's claim
// in parts (a statement whose fence check ran just before the claim).
func (a *Aggregator) undoZombies(ctx context.Context, parts []*partition) error {
	return a.UndoZombies(ctx, a.deltas, parts, func(p *partition) string { return p.invalid }, a.zombies, nil)
}
