package views

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/aggregator/engine"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
)

// This file is the flush: the exactly-once write of the pending batches and the periodic writes
// beside it, as named steps in the order the guarantees need (docs/EXACTLY_ONCE.md). Every step
// runs under the aggregator's lock, from the consume loop.

// flush is one flush: what it writes, decided at its start, and the batch it takes.
type flush struct {
	engine.Flush

	parts, sketchParts        []*partition // pending batches and dirty sketches, by id
	withRollups, housekeeping bool

	attempts int                    // of the deltas' write
	taken    map[int32]takenBatch   // the batches stored, by partition
	t0, mark time.Time              // the flush's start and the last step's end
	steps    prometheus.ObserverVec // the step timings, by step name
}

// takenBatch is what a partition's batch leaves to the steps after its deltas are stored.
type takenBatch struct {
	from int64                 // the checkpoint before the batch
	mem  map[string]int64      // its per-item totals, for Redis
	secs []schemas.BucketCount // its per-second counts, for the counted topic
}

// step records the time since the previous step's end as the named step's, when it ran.
func (f *flush) step(name string, ran bool) {
	t := time.Now()
	if ran {
		f.steps.WithLabelValues(name).Observe(t.Sub(f.mark).Seconds())
	}
	f.mark = t
}

// batch reports whether the flush writes a batch.
func (f *flush) batch() bool { return len(f.parts) > 0 }

// Write is the flush: the batches of the partitions f names, with the periodic work whose slots
// are due (all of it for engine.All). Its steps, in order: plan, write the batch (dedupe state
// and batch items, then the deltas with the checkpoint), take it, check the claims, publish
// (Redis totals, counted topic), then the periodic writes.
func (a *Aggregator) Write(ctx context.Context, ef engine.Flush) (member.Offsets, error) {
	// A sketch write still under way holds the next one back (the checkpoints must move in
	// order); a clean stop or a revoke waits for it, and writes what is left after it.
	if err := a.settleSketches(ef.Mode == engine.All); err != nil {
		return nil, err
	}
	f := a.planFlush(ef)
	if err := a.writeBatch(ctx, f); err != nil {
		return nil, err
	}
	a.takeBatch(f)
	// A writer that lost the partition before or while writing its deltas (whose rows the
	// statement then dropped) stops here, its batch undone whole by the owner, and applies and
	// publishes nothing. The same statement checks the partitions whose sketches are written
	// after.
	if err := a.Retry(ctx, "check partition claims", func() error { return a.CheckClaims(ctx, &f.parts, &f.sketchParts) }); err != nil {
		return nil, err
	}
	f.step("claims_check", f.batch() || len(f.sketchParts) > 0)
	done := a.publishBatch(ctx, f)
	if err := a.writePeriodic(ctx, f); err != nil {
		return nil, err
	}
	if len(done) == 0 {
		return nil, nil
	}
	return member.Offsets{schemas.TopicViews: done}, nil
}

// planFlush decides what flush ef writes: the pending batches (of ef.Only, when set), and the
// sketches, rollups and housekeeping whose slots are due (all of them for engine.All).
func (a *Aggregator) planFlush(ef engine.Flush) *flush {
	f := &flush{Flush: ef, t0: time.Now(), steps: a.m.flushSteps}
	f.mark = f.t0
	now, only, all := ef.Now, ef.Only, ef.Mode == engine.All
	withSketches := all || a.sketching == nil && a.sketchSlot.Due(now)
	f.withRollups = all || a.rollupSlot.Due(now)
	// The zombie checks, the fold and the Redis totals check run in the check slot; a revoke
	// (only) writes its own partitions' sketches and rollups and leaves the rest, and the slots,
	// to the next flushes.
	f.housekeeping = only == nil && (all || a.checkSlot.Due(now))
	if only == nil && withSketches {
		a.sketchSlot.Done(now)
	}
	if only == nil && f.withRollups {
		a.rollupSlot.Done(now)
	}
	if f.housekeeping {
		a.checkSlot.Done(now)
	}
	for _, p := range a.Held(only) {
		if p.pending() {
			f.parts = append(f.parts, p)
		}
		if withSketches && p.sketchesPending(now, all) {
			f.sketchParts = append(f.sketchParts, p)
		}
	}
	return f
}

// writeBatch stores the pending batches: the dead letters of the records they set aside, then
// dedupe state and batch items, side by side (both are idempotent and neither needs the other,
// so a crash before the deltas only means they are written again on replay, and one's rows are
// encoded and sent while the engine stores the other's), then the deltas, which carry the
// checkpoint. The sketches start last, once the batch is visible in Redis, and are written
// beside the loop: they are the largest periodic write and no batch should wait for them; a
// crash before they are stored leaves the sketch checkpoint behind the deltas', and the replay
// from it goes into the sketches only.
func (a *Aggregator) writeBatch(ctx context.Context, f *flush) error {
	if f.batch() {
		if err := deadletter.SetAside(ctx, a.store.dead, a.store.conn, a.Retry, f.parts, func(p *partition) *[]deadletter.Letter { return &p.dead }); err != nil {
			return err
		}
		// The goroutine records its progress at the flush's time, as the sketch write does.
		at := func() time.Time { return f.Now }
		var dedupeErr error
		var dedupe sync.WaitGroup
		dedupe.Go(func() {
			dedupeErr = a.RetryAt(ctx, "write dedupe state", at, func() error { return a.store.writeDedupe(ctx, f.parts) })
		})
		itemsErr := a.Retry(ctx, "write batch items", func() error { return a.store.writeBatchItems(ctx, f.parts, f.Now) })
		dedupe.Wait()
		if err := errors.Join(dedupeErr, itemsErr); err != nil {
			return err
		}
	}
	f.step("dedupe_state_and_batch_items", f.batch())
	if err := a.Retry(ctx, "write deltas", func() error {
		// A newer owner's claim makes this write a zombie's: the statement drops its rows
		// (migration 011), and the check after it drops the partition here.
		if !f.batch() {
			return nil
		}
		if f.attempts > 0 {
			done, err := a.deltas.Written(ctx, f.parts[0].id, f.parts[0].epoch, f.parts[0].next)
			if err != nil || done {
				return err
			}
		}
		f.attempts++
		return a.store.writeDeltas(ctx, f.parts, f.Now)
	}); err != nil {
		return err
	}
	f.step("deltas", f.batch())
	return nil
}

// takeBatch resets the stored batches at once, so that no later step can write them again, and
// keeps what the steps after need.
func (a *Aggregator) takeBatch(f *flush) {
	f.taken = make(map[int32]takenBatch, len(f.parts))
	for _, p := range f.parts {
		t := takenBatch{from: p.flushed, mem: p.itemDeltas()}
		// The rollups are written from memory when the deltas went in at the first attempt;
		// otherwise (unknown outcome) they are repaired from the deltas, which compares before
		// it writes.
		if f.attempts == 1 {
			p.addRollups()
		} else {
			p.rollupsLost = true
		}
		if a.cfg.Counted != nil {
			t.secs = p.secondCounts()
		}
		f.taken[p.id] = t
		p.markFlushed(p.next, f.Now)
	}
}

// publishBatch makes the batches readable (Redis) and publishes them to the counted topic, and
// returns the new checkpoints. Each partition's publish waits for the broker to acknowledge
// every chunk, in order (a failure must leave a prefix: topk's guards skip what they saw). Each
// partition's Redis apply is a few guarded scripts in order, under a guard of its own. A
// partition's publish and apply touch only its own countedEnd and redisEnd, so all of them go at
// once instead of holding the consume loop for one round trip after another.
func (a *Aggregator) publishBatch(ctx context.Context, f *flush) map[int32]int64 {
	var published, applied sync.WaitGroup
	done := make(map[int32]int64, len(f.parts))
	for _, p := range f.parts {
		t := f.taken[p.id]
		done[p.id] = p.flushed
		published.Go(func() { a.syncCounted(ctx, p, t.secs, t.from) })
		applied.Go(func() { a.syncTotals(ctx, p, t.mem, t.from) })
	}
	applied.Wait()
	readable := f.batch() && a.tot != nil
	if readable {
		a.m.readableSeconds.Observe(f.Since.Seconds() + time.Since(f.t0).Seconds())
	}
	f.step("redis_totals", readable)
	published.Wait()
	f.step("counted_publish", f.batch() && a.cfg.Counted != nil)
	return done
}

// writePeriodic runs the writes whose slots are due, after the batch: rollups, the zombie
// check, the sketch deltas, the fold and the Redis totals check.
func (a *Aggregator) writePeriodic(ctx context.Context, f *flush) error {
	if f.withRollups {
		if err := a.writeRollups(ctx, f.Only); err != nil {
			return err
		}
	}
	f.step("rollups", f.withRollups)
	if f.housekeeping {
		if err := a.undoZombies(ctx); err != nil {
			return err
		}
	}
	f.step("zombie_check", f.housekeeping)
	if len(f.sketchParts) > 0 {
		if err := a.writeSketches(ctx, f.sketchParts, f.Now, f.Mode == engine.All); err != nil {
			return err
		}
		if f.Mode == engine.All {
			if err := a.settleSketches(true); err != nil {
				return err
			}
		}
	}
	f.step("sketch_deltas", len(f.sketchParts) > 0)
	if f.housekeeping {
		if err := a.foldSketches(ctx, f.Now); err != nil {
			return err
		}
	}
	f.step("fold", f.housekeeping)
	if f.housekeeping && a.tot != nil {
		a.checkTotals(ctx)
	}
	f.step("redis_totals_check", f.housekeeping && a.tot != nil)
	return nil
}

// undoZombies looks for zombies' late batches (cheap: batch_items) in the partitions no newer
// owner has claimed: this aggregator may itself be the zombie, and then the partitions it holds
// with nothing pending are dropped here.
func (a *Aggregator) undoZombies(ctx context.Context) error {
	held := a.Held(nil)
	if err := a.Retry(ctx, "check partition claims", func() error { return a.CheckClaims(ctx, &held) }); err != nil {
		return err
	}
	after := make(map[*partition]int64, len(held))
	for _, p := range held {
		after[p] = p.zombiesFrom(a.now())
	}
	return a.Retry(ctx, "undo zombie batches", func() error { return a.reconcile(ctx, after) })
}
