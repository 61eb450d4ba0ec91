// Package engine is the partition engine every exactly-once stream of the aggregator runs on.
// It owns what the streams share: the assigned partitions' states under one lock; their
// assignment (each claimed and loaded by the stream), revocation and loss; handing each
// partition the records of its topics; the flush schedule (interval and batch size, package
// flushpace); the fence check that drops a partition a newer owner claimed, and reclaiming it
// when the group keeps delivering its records; ClickHouse steps retried with backoff and their
// health for readiness (package writes); and the metrics every stream has, named
// tally_<stream>_… What differs between streams is a rule set (Rules): how a partition is
// claimed and loaded, how a record applies to it, and what a flush writes. A new stream is a
// new rule set; docs/ARCHITECTURE.md shows today's three.
//
// An Engine is the member.Engine a member.Source drives. Concurrency: every exported method but
// Held, Holds, CheckClaims, Retry and RetryAt locks the engine's mutex and calls the rule set with
// it held; those five are for the rule set, called from inside its methods, under that lock.
// The Engine owns no goroutines beyond Assign's claims, which run concurrently under the lock
// and are done when Assign returns.
package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/tallypipeline/tally/aggregator/flushpace"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/aggregator/writes"
	"github.com/tallypipeline/tally/platform/fence"
)

// Partition is a rule set's state of one assigned partition, as the engine reads it.
type Partition interface {
	comparable
	ID() int32
	// Epoch is the claim this owner writes under.
	Epoch() uint64
	// Batched is how many records the pending batch holds, against Config.MaxBatch.
	Batched() int
}

// Start is where a claimed partition resumes, per topic: At nil only at the partition's first
// claim without a checkpoint (it resumes at Kafka's committed offset; fence.Claim.ResumesAtStart);
// Counted, where set, is how far it has counted beyond At (member.Resume).
type Start struct {
	At, Counted map[string]int64
}

// Applied is what records applied to a partition did, for the metrics.
type Applied struct {
	Records  int // applied (records below the partition's position are skipped)
	Counted  int // counted after dedupe
	SetAside int // refused: undecodable or invalid, on their way to dead_letters
}

// Mode says how much of the periodic work a flush does.
type Mode uint8

const (
	// Due writes the batches, and the periodic work whose interval has passed.
	Due Mode = iota
	// All writes everything held now: a clean stop, a revoke.
	All
)

// Flush is one flush as the rule set writes it.
type Flush struct {
	Now   time.Time
	Since time.Duration // since the previous flush started (flushpace.Pace.Start)
	Mode  Mode
	// Only holds the partitions of a revoke, nil for a flush of every held partition.
	Only map[int32]bool
}

// Rules is a stream's rule set. The engine calls its methods with its lock held.
type Rules[P Partition] interface {
	// Claim claims partition id under a new epoch (the fence) and loads its state. The
	// partitions of one assignment are claimed concurrently: Claim touches the state of id
	// alone, and calls none of the engine's methods.
	Claim(ctx context.Context, id int32) (P, Start, error)
	// Claimed follows the Claims of one assignment, once the partitions are held: catch-ups
	// that read or write several partitions at once. Its failures are the rule set's to retry.
	Claimed(ctx context.Context, ps []P)
	// Apply applies records of one topic to p in offset order, skipping those below p's position
	// (a fetch that raced a seek), so that each offset is applied once.
	Apply(p P, topic string, recs []*kgo.Record) Applied
	// Write writes the pending batches of the held partitions (those of f.Only when set) and
	// the periodic work f says, and returns the checkpoint written of each partition.
	Write(ctx context.Context, f Flush) (member.Offsets, error)
}

// Config is a stream's engine.
type Config struct {
	// Stream names the stream in logs and errors; Metrics its metrics.
	Stream  string
	Metrics Names
	// Claims is the stream's claims table, read by the fence check.
	Claims        fence.Table
	FlushInterval time.Duration
	MaxBatch      int // records of one partition that make a flush due
	// ClaimWorkers is how many partitions of one assignment are claimed at once; 0 means
	// DefaultClaimWorkers. One with ClickHouse quorum inserts (insert_quorum_parallel 0 refuses an
	// INSERT into a table while another waits for its quorum, and one refused claim fails the
	// whole assignment).
	ClaimWorkers int
	// StepSeconds, when set, times every retried step by name (package writes).
	StepSeconds *prometheus.HistogramVec
	Conn        driver.Conn // for the writes' schema check
	Now         func() time.Time
	Logger      *slog.Logger
	Registry    prometheus.Registerer
}

// Engine holds a stream's assigned partitions and drives its rule set.
type Engine[P Partition] struct {
	c      Config
	rules  Rules[P]
	writes *writes.Tracker

	mu    sync.Mutex
	parts map[int32]P
	// fenced holds the partitions dropped because a newer owner claimed them, until the group
	// says what became of them; dropped, those of them not yet handed to the Source (Dropped);
	// reclaim, those of them whose records the group still delivers here (Reclaims).
	fenced, dropped, reclaim map[int32]bool
	pace                     *flushpace.Pace
	m                        metrics
}

// New returns the engine of rules, its metrics registered.
func New[P Partition](c Config, rules Rules[P]) *Engine[P] {
	e := &Engine[P]{c: c, rules: rules, parts: map[int32]P{},
		fenced: map[int32]bool{}, dropped: map[int32]bool{}, reclaim: map[int32]bool{},
		pace: flushpace.New(c.FlushInterval, c.Now()), m: newMetrics(c.Metrics, c.Registry)}
	e.writes = writes.New(writes.Config{Conn: c.Conn, Now: c.Now, Logger: c.Logger, Errors: e.m.flushErrors, Steps: c.StepSeconds})
	return e
}

// Assign claims and loads partitions ids, and says where each resumes. It also reports to
// readiness whether partition state loads: an assignment that keeps failing is counting stopped.
// When one claim fails none of ids is held: the member retries the whole assignment.
func (e *Engine[P]) Assign(ctx context.Context, ids []int32) (member.Resume, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		delete(e.fenced, id)
		delete(e.dropped, id)
		delete(e.reclaim, id)
	}
	claimed, err := e.claim(ctx, ids)
	if err != nil {
		e.writes.Failed(e.c.Now(), err)
		return member.Resume{}, err
	}
	var r member.Resume
	ps := make([]P, len(ids))
	for i, id := range ids {
		ps[i] = claimed[i].p
		e.parts[id] = ps[i]
		r.At, r.Counted = place(r.At, id, claimed[i].start.At), place(r.Counted, id, claimed[i].start.Counted)
	}
	e.writes.Succeeded(e.c.Now())
	e.rules.Claimed(ctx, ps)
	return r, nil
}

// DefaultClaimWorkers is how many partitions of one assignment are claimed at once unless
// Config says otherwise. A claim is a dozen round trips to ClickHouse, Redis and Kafka, mostly
// waiting, and a member cannot rejoin its group before its assignment is claimed: one after
// another, eight partitions held every rebalance seconds longer.
const DefaultClaimWorkers = 4

// claimed is one partition's claim.
type claimed[P Partition] struct {
	p     P
	start Start
}

// claim claims partitions ids, Config.ClaimWorkers at a time, and returns them in the order of
// ids.
// The first failure cancels the claims still under way.
func (e *Engine[P]) claim(ctx context.Context, ids []int32) ([]claimed[P], error) {
	out := make([]claimed[P], len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(e.c.ClaimWorkers, DefaultClaimWorkers))
	for i, id := range ids {
		g.Go(func() error {
			t0 := e.c.Now()
			p, s, err := e.rules.Claim(gctx, id)
			e.m.claimSeconds.Observe(e.c.Now().Sub(t0).Seconds())
			if err != nil {
				return fmt.Errorf("load %s partition %d state: %w", e.c.Stream, id, err)
			}
			out[i] = claimed[P]{p, s}
			return nil
		})
	}
	return out, g.Wait()
}

// place adds partition id's offsets per topic to o.
func place(o member.Offsets, id int32, at map[string]int64) member.Offsets {
	for topic, off := range at {
		if o == nil {
			o = member.Offsets{}
		}
		if o[topic] == nil {
			o[topic] = map[int32]int64{}
		}
		o[topic][id] = off
	}
	return o
}

// Process applies records of one topic's partition id. The records of a partition dropped for a
// newer owner's claim make it a reclaim.
func (e *Engine[P]) Process(topic string, id int32, recs []*kgo.Record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.parts[id]
	if !ok {
		if e.fenced[id] {
			e.reclaim[id] = true
		}
		return
	}
	a := e.rules.Apply(p, topic, recs)
	e.m.records.Add(float64(a.Records))
	e.m.counted.Add(float64(a.Counted))
	e.m.setAside.Add(float64(a.SetAside))
}

// Reclaims returns, and forgets, the partitions dropped because a newer owner claimed them but
// whose records the group still delivers here. The group can give them back without telling (a
// static member that rejoins keeps its assignment, with no revocation or loss): the caller
// claims them again with Assign and seeks to the offsets it returns, or they would never be
// counted again.
func (e *Engine[P]) Reclaims() []int32 { return e.take(e.reclaim) }

// Dropped returns, and forgets, the partitions dropped for a newer owner's claim since the last
// call. Their records may all have been fetched already (the producers went quiet), and then no
// record would ever make them a reclaim although the group still assigns them here: the caller
// fetches them again from an earlier offset, which the client does only for partitions it still
// consumes.
func (e *Engine[P]) Dropped() []int32 { return e.take(e.dropped) }

// take returns the partitions of set, sorted, and empties it.
func (e *Engine[P]) take(set map[int32]bool) []int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := slices.Sorted(maps.Keys(set))
	clear(set)
	return ids
}

// FlushDue reports whether the flush schedule says a flush is due or a partition's batch is
// full.
func (e *Engine[P]) FlushDue() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pace.Due(e.c.Now()) {
		return true
	}
	for _, p := range e.parts {
		if p.Batched() >= e.c.MaxBatch {
			return true
		}
	}
	return false
}

// Flush writes every pending batch and the periodic work that is due, and returns the new
// checkpoints. The rule set retries ClickHouse errors until they pass or ctx ends; consumption
// waits meanwhile, so an outage turns into lag, not loss.
func (e *Engine[P]) Flush(ctx context.Context) (member.Offsets, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.flush(ctx, nil, Due)
}

// FlushAll writes everything held, for a clean stop: the next start replays nothing.
func (e *Engine[P]) FlushAll(ctx context.Context) (member.Offsets, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.flush(ctx, nil, All)
}

// Revoke writes everything held of ids and forgets them: the next owner resumes from the
// checkpoints just written.
func (e *Engine[P]) Revoke(ctx context.Context, ids []int32) (member.Offsets, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	only := make(map[int32]bool, len(ids))
	for _, id := range ids {
		only[id] = true
	}
	done, err := e.flush(ctx, only, All)
	e.forget(ids)
	e.c.Logger.Info("partitions revoked", "stream", e.c.Stream, "partitions", ids)
	return done, err
}

// Lost forgets ids without writing: another consumer may already own them.
func (e *Engine[P]) Lost(ids []int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.forget(ids)
	e.c.Logger.Warn("partitions lost; pending batches dropped, the new owner replays them", "stream", e.c.Stream, "partitions", ids)
}

func (e *Engine[P]) forget(ids []int32) {
	for _, id := range ids {
		delete(e.parts, id)
		delete(e.fenced, id)
		delete(e.dropped, id)
		delete(e.reclaim, id)
	}
}

func (e *Engine[P]) flush(ctx context.Context, only map[int32]bool, mode Mode) (member.Offsets, error) {
	now := e.c.Now()
	since := e.pace.Start(now)
	e.m.lag.Set(since.Seconds())
	defer func() { e.pace.End(e.c.Now()) }()
	t0 := time.Now()
	done, err := e.rules.Write(ctx, Flush{Now: now, Since: since, Mode: mode, Only: only})
	if err == nil && len(done) > 0 {
		e.m.flushSeconds.Observe(time.Since(t0).Seconds())
	}
	return done, err
}

// Check reports an error, for readiness, while the stream's ClickHouse steps keep failing
// (package writes).
func (e *Engine[P]) Check(ctx context.Context) error { return e.writes.Check(ctx) }

// Each calls fn for every held partition, under the lock (for gauges read beside the loop).
func (e *Engine[P]) Each(fn func(P)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.parts {
		fn(p)
	}
}

// Held returns the held partitions (those of only, when set), by id. For the rule set.
func (e *Engine[P]) Held(only map[int32]bool) []P {
	ps := make([]P, 0, len(e.parts))
	for id, p := range e.parts {
		if only == nil || only[id] {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b P) int { return int(a.ID()) - int(b.ID()) })
	return ps
}

// Holds reports whether p is still held: not dropped by a fence check, revoked or lost since it
// was claimed. For the rule set.
func (e *Engine[P]) Holds(p P) bool {
	q, ok := e.parts[p.ID()]
	return ok && q == p
}

// CheckClaims drops from each of lists, and from the engine, every partition a newer owner has
// claimed since this one did: its batch must not be written. One statement checks every list.
// For the rule set.
func (e *Engine[P]) CheckClaims(ctx context.Context, lists ...*[]P) error {
	var ids []int32
	for _, l := range lists {
		for _, p := range *l {
			if !slices.Contains(ids, p.ID()) {
				ids = append(ids, p.ID())
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	epochs, err := e.c.Claims.MaxEpochs(ctx, ids)
	if err != nil {
		return err
	}
	for _, l := range lists {
		*l = slices.DeleteFunc(*l, func(p P) bool {
			newest := epochs[p.ID()]
			if newest <= p.Epoch() {
				return false
			}
			if e.Holds(p) { // not already dropped by an earlier list of this check
				e.m.fenced.Inc()
				e.c.Logger.Warn("partition claimed by a newer owner; its pending batch is dropped", "stream", e.c.Stream,
					"partition", p.ID(), "epoch", p.Epoch(), "newest_epoch", newest)
				delete(e.parts, p.ID())
				e.fenced[p.ID()] = true
				e.dropped[p.ID()] = true
			}
			return true
		})
	}
	return nil
}

// Retry runs a ClickHouse step until it succeeds or ctx ends (package writes). For the rule set.
func (e *Engine[P]) Retry(ctx context.Context, what string, fn func() error) error {
	return e.writes.Do(ctx, what, fn)
}

// RetryAt is Retry recording its health at the times at gives: for a step run beside the loop,
// which must not read the clock the loop reads.
func (e *Engine[P]) RetryAt(ctx context.Context, what string, at func() time.Time, fn func() error) error {
	return e.writes.DoAt(ctx, what, at, fn)
}

// WriteFenced writes the batches of *parts in one statement (write), retried until it succeeds
// or ctx ends. Each attempt first drops from *parts the partitions a newer owner claimed
// (CheckClaims), and an attempt after one whose outcome is unknown first asks whether the batch
// went in (landed, for the first partition: the statement writes every batch or none). For the
// rule set.
func (e *Engine[P]) WriteFenced(ctx context.Context, what string, parts *[]P, landed func(P) (bool, error), write func([]P) error) error {
	if len(*parts) == 0 {
		return nil
	}
	attempts := 0
	return e.Retry(ctx, what, func() error {
		if err := e.CheckClaims(ctx, parts); err != nil || len(*parts) == 0 {
			return err
		}
		if attempts > 0 {
			done, err := landed((*parts)[0])
			if err != nil || done {
				return err
			}
		}
		attempts++
		return write(*parts)
	})
}

// UndoZombies looks in batches, in one statement, for the batches of parts that their fence
// (invalid gives each partition's AnyInvalidSQL) makes invalid: batches of owners that lost the
// partition that landed after this owner's claim. It deletes the rows of those of each partition
// that has any, then counts them in undone and logs them. around, when set, runs a partition's
// delete (del) inside the rule set's own repair of what its zombies' batches touched, and returns
// what the log line adds. For the rule set.
func (e *Engine[P]) UndoZombies(ctx context.Context, batches fence.Batches, parts []P, invalid func(P) string,
	undone prometheus.Counter, around func(p P, del func() error) ([]any, error)) error {
	conds := make(map[int32]string, len(parts))
	for _, p := range parts {
		conds[p.ID()] = invalid(p)
	}
	found, err := batches.Invalid(ctx, conds)
	if err != nil {
		return err
	}
	if around == nil {
		around = func(_ P, del func() error) ([]any, error) { return nil, del() }
	}
	for _, p := range parts {
		if n := found[p.ID()]; n > 0 {
			attrs, err := around(p, func() error { return batches.Delete(ctx, p.ID(), conds[p.ID()]) })
			if err != nil {
				return err
			}
			undone.Add(float64(n))
			e.c.Logger.Warn("undid batches written by an aggregator after it lost the partition",
				append([]any{"stream", e.c.Stream, "partition", p.ID(), "batches", n}, attrs...)...)
		}
	}
	return nil
}
