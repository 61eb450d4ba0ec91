package views

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/schemas"
)

// Item totals and unique-viewer estimates in Redis (platform/totals), which the collector reads
// for counts: each batch is applied after its ClickHouse write under the partition's guard
// (epoch, end offset, chunk), so a replay never applies it twice. Redis that fell behind (an
// error, a crash between the two writes) catches up from the batches ClickHouse holds; Redis
// that lost the partition's guard (restarted empty) is rebuilt from ClickHouse's totals.

// syncTotals brings Redis up to p's deltas checkpoint. mem is the batch just written (item ->
// views), applied directly when Redis is known to hold everything before it; otherwise the
// missing batches are read back from ClickHouse, or everything is rebuilt (rebuildTotals).
// Errors are logged and retried at the next flush: Redis lagging never stops counting in
// ClickHouse. A flush runs it for all its partitions at once, so it changes nothing but p's own
// fields (the Redis store and the ClickHouse pool are safe for concurrent use).
func (a *Aggregator) syncTotals(ctx context.Context, p *partition, mem map[string]int64, memFrom int64) {
	if a.tot == nil {
		return
	}
	if p.redisEnd == memFrom && p.redisClaimed && mem != nil {
		if _, err := a.tot.Apply(ctx, p.id, p.epoch, p.redisEnd, p.flushed, mem); err == nil {
			p.redisEnd = p.flushed
			return
		} else {
			a.logger.Warn("apply totals to redis; catching up from clickhouse", "partition", p.id, "err", err)
		}
	}
	if err := a.catchUpTotals(ctx, []*partition{p}); err != nil {
		a.m.totalsErrors.Inc()
		a.logger.Warn("bring redis totals up to the checkpoint; retrying at the next flush", "partition", p.id, "err", err)
	}
}

// checkTotals, at the sketch interval, catches up partitions with nothing new to flush: those
// behind after a Redis outage, and all of them when Redis lost its ready marker (restarted
// empty: every guard is gone, also of partitions this owner believes in sync).
func (a *Aggregator) checkTotals(ctx context.Context) {
	ready, err := a.tot.Ready(ctx)
	if err != nil {
		a.m.totalsErrors.Inc()
		a.logger.Warn("read redis totals marker", "err", err)
		return
	}
	var behind []*partition
	for _, p := range a.Held(nil) {
		if !ready || p.redisEnd != p.flushed || !p.redisClaimed {
			behind = append(behind, p)
		}
	}
	if len(behind) == 0 {
		return
	}
	if err := a.catchUpTotals(ctx, behind); err != nil {
		a.m.totalsErrors.Inc()
		a.logger.Warn("bring redis totals up to the checkpoint; retrying at the next sketch interval", "err", err)
	}
}

// catchUpTotals makes Redis hold exactly the valid batches of parts up to their checkpoints:
// each partition's guard is raised to this owner's epoch first (claimTotals), after which older
// owners' applies are refused, then the batches after the guard are applied from ClickHouse
// under this owner's epoch (a half-applied batch resumes at its next chunk), and partitions
// whose guard is gone, or whose totals cannot be vouched for, are rebuilt.
func (a *Aggregator) catchUpTotals(ctx context.Context, parts []*partition) error {
	var rebuild []*partition
	for _, p := range parts {
		g, err := a.claimTotals(ctx, p)
		if err != nil {
			return err
		}
		if !g.Found {
			rebuild = append(rebuild, p)
			continue
		}
		if err := a.applyStoredBatches(ctx, p, g.End); err != nil {
			return err
		}
		p.redisEnd, p.redisClaimed = p.flushed, true
	}
	if len(rebuild) > 0 {
		return a.rebuildTotals(ctx, rebuild) // which marks the totals ready
	}
	if _, err := a.tot.MarkReadyIfComplete(ctx, int(a.partitions.Load())); err != nil {
		return fmt.Errorf("mark redis totals ready: %w", err)
	}
	return nil
}

// claimTotals raises p's Redis guard to p's epoch and returns it as it found it, or a guard not
// Found when p's totals must be rebuilt: there is none, or what Redis holds cannot be vouched
// for. The guard is raised before it is judged, so that no older owner's apply lands between
// the two. Redis's totals cannot be vouched for when:
//   - p.redisStale says so (the stores disagreed about p's epochs when it was claimed);
//   - the guard holds an epoch newer than every claim ClickHouse holds (partition_claims lost
//     rows while Redis was unreachable at the claim);
//   - the guard holds a batch that p's claims make invalid: an owner that lost the partition
//     applied a batch that landed after this owner's claim, before the claim reached Redis;
//     applying on top would skip this owner's batches up to its end as already applied.
//
// Those totals are invalidated first: the guard and the ready marker go in one step, so readers
// answer from ClickHouse until the rebuild is done, and a crash in between leaves the guard
// missing, which the next owner rebuilds in turn.
func (a *Aggregator) claimTotals(ctx context.Context, p *partition) (totals.Guard, error) {
	if !p.redisStale {
		g, err := a.tot.Claim(ctx, p.id, p.epoch)
		var none *totals.NoGuardError
		var fenced *totals.FencedError
		switch {
		case errors.As(err, &none):
			return totals.Guard{}, nil
		case errors.As(err, &fenced):
			if err := a.distrustNewerGuard(ctx, p, fenced.GuardEpoch); err != nil {
				return totals.Guard{}, err
			}
		case err != nil:
			return totals.Guard{}, err
		case g.Epoch < p.epoch && !p.fence.Valid(g.Epoch, g.End):
			a.logger.Warn("redis totals hold a batch its owner wrote after losing the partition; rebuilding them from clickhouse",
				"partition", p.id, "guard_epoch", g.Epoch, "guard_end", g.End, "epoch", p.epoch, "claim_start", p.start)
			p.redisStale = true
		default:
			return g, nil
		}
	}
	if err := a.tot.Invalidate(ctx, p.id); err != nil {
		return totals.Guard{}, err
	}
	a.logger.Warn("redis totals of the partition invalidated: readers answer from clickhouse until they are rebuilt", "partition", p.id)
	p.redisStale = false // the missing guard now calls for the rebuild, also after a crash
	return totals.Guard{}, nil
}

// distrustNewerGuard judges a Redis guard of an epoch newer than p's: a newer owner's (an
// error: this owner lost the partition), unless ClickHouse knows no claim newer than p's, when
// the guard outlived the claims that made it and p's totals are marked stale.
func (a *Aggregator) distrustNewerGuard(ctx context.Context, p *partition, epoch uint64) error {
	newest, err := a.claims.MaxEpochs(ctx, []int32{p.id})
	if err != nil {
		return err
	}
	if newest[p.id] > p.epoch {
		return fmt.Errorf("partition %d: redis guard holds epoch %d, newer than ours (%d)", p.id, epoch, p.epoch)
	}
	a.m.epochDisagreements.Inc()
	a.logger.Warn("redis totals guard holds a newer epoch than every claim of the partition (partition_claims lost rows); rebuilding its redis totals from clickhouse",
		"partition", p.id, "guard_epoch", epoch, "epoch", p.epoch)
	p.redisStale = true
	return nil
}

// applyStoredBatches applies p's valid batches ending in [from, p.flushed] from ClickHouse,
// under p's epoch: the guard already carries it (claimTotals), and its end and chunk say where
// the batches Redis holds stop, whoever applied them.
func (a *Aggregator) applyStoredBatches(ctx context.Context, p *partition, from int64) error {
	if from >= p.flushed {
		return nil
	}
	batches, err := a.store.batchTotals(ctx, p.id, from, p.flushed, p.fence.InvalidSQL())
	if err != nil {
		return err
	}
	for _, b := range batches {
		if _, err := a.tot.Apply(ctx, p.id, p.epoch, totals.Unchecked, b.end, b.items); err != nil {
			return err
		}
	}
	return nil
}

// fixTotals sets the Redis totals of items (of partition p) to what ClickHouse holds, after a
// zombie's batches were undone there: an apply of theirs may have reached Redis before this
// owner's guard refused it. Redis behind the checkpoint, or without the partition's guard, is
// rebuilt for the whole partition.
func (a *Aggregator) fixTotals(ctx context.Context, p *partition, items []string) error {
	if a.tot == nil {
		return nil
	}
	if p.redisEnd != p.flushed || !p.redisClaimed {
		return a.rebuildTotals(ctx, []*partition{p})
	}
	values, err := a.store.itemTotals(ctx, items)
	if err != nil {
		return err
	}
	for _, it := range items {
		if _, ok := values[it]; !ok {
			values[it] = 0
		}
	}
	err = a.tot.Repair(ctx, p.id, totals.Guard{Epoch: p.epoch, End: p.flushed}, values)
	var fenced *totals.FencedError
	if err == nil || errors.As(err, &fenced) {
		return err
	}
	// Redis lost what this owner applied (emptied, or failed over to a replica behind it):
	// repaired alone, these items would be vouched for and the rest of the partition not.
	a.logger.Warn("redis lost the partition's totals under a repair; rebuilding them from clickhouse", "partition", p.id, "err", err)
	return a.rebuildTotals(ctx, []*partition{p})
}

// rebuildTotals sets every item total and unique estimate of parts from ClickHouse's rollups,
// with each partition's guard at its checkpoint, and marks the totals ready if every partition
// has its guard (each partition's rebuild takes the marker away: totals.Store.Set). The
// rollups are made to hold every batch up to the checkpoint first (a repair from the deltas,
// which compares before it writes): copying rollups that lag and adding the later batches from
// the deltas would count twice whatever part of those batches the rollups already hold (a
// repair just done, a rollup write that failed halfway). Items map to partitions as the
// producer's partitioner maps their keys.
func (a *Aggregator) rebuildTotals(ctx context.Context, parts []*partition) error {
	if int(a.partitions.Load()) <= 0 {
		return errors.New("rebuild redis totals: the views topic's partition count is unknown")
	}
	mine := map[int32]*partition{}
	for _, p := range parts {
		if err := a.reconcileWith(ctx, p, nil); err != nil {
			return fmt.Errorf("rebuild redis totals of partition %d: roll up its batches: %w", p.id, err)
		}
		mine[p.id] = p
	}
	views := map[int32]map[string]int64{}
	unique := map[string]uint64{}
	part := kgo.StickyKeyPartitioner(nil).ForTopic(schemas.TopicViews)
	owner := func(item string) *partition {
		return mine[int32(part.Partition(&kgo.Record{Key: []byte(item)}, int(a.partitions.Load())))]
	}
	// What Redis holds of these partitions' items is overwritten, down to items ClickHouse no
	// longer has (set to 0, which deletes them): a rebuild after a loss in ClickHouse (a
	// database re-created empty) must not keep totals nobody can vouch for. Redis that lost its
	// data lists nothing here.
	held := map[string]bool{}
	if err := a.tot.Items(ctx, func(item string) {
		if owner(item) != nil {
			held[item] = true
		}
	}); err != nil {
		return fmt.Errorf("rebuild redis totals: %w", err)
	}
	for _, p := range parts {
		views[p.id] = map[string]int64{}
	}
	if err := a.store.eachTotal(ctx, func(item string, v int64, u uint64) {
		p := owner(item)
		if p == nil {
			return
		}
		if v != 0 || held[item] {
			views[p.id][item] = v
		}
		if u != 0 || held[item] {
			unique[item] = u
		}
		delete(held, item)
	}); err != nil {
		return err
	}
	for item := range held {
		views[owner(item).id][item] = 0
		unique[item] = 0
	}
	if err := a.tot.SetUnique(ctx, unique); err != nil {
		return fmt.Errorf("rebuild redis unique viewers: %w", err)
	}
	for _, p := range parts {
		if err := a.tot.Set(ctx, p.id, totals.Guard{Epoch: p.epoch, End: p.flushed, Chunk: totals.AllChunks}, views[p.id]); err != nil {
			return fmt.Errorf("rebuild redis totals of partition %d: %w", p.id, err)
		}
		p.redisEnd, p.redisClaimed = p.flushed, true
		a.logger.Info("redis totals rebuilt from clickhouse", "partition", p.id, "items", len(views[p.id]), "checkpoint", p.flushed)
	}
	// A rebuild takes the ready marker away while it runs.
	if _, err := a.tot.MarkReadyIfComplete(ctx, int(a.partitions.Load())); err != nil {
		return fmt.Errorf("mark redis totals ready: %w", err)
	}
	return nil
}

// storedBatch is one batch's views per item, read back from view_deltas.
type storedBatch struct {
	epoch uint64
	end   int64
	items map[string]int64
}

// batchTotals reads partition p's valid batches ending in [from, to], in offset order.
func (s *store) batchTotals(ctx context.Context, p int32, from, to int64, invalid string) ([]storedBatch, error) {
	var item string
	var n int64
	return readBatches(ctx, s, p, from, to, invalid, batchRead[storedBatch]{what: "batches",
		cols: "item_id, toInt64(sum(views))", group: "item_id", dest: []any{&item, &n},
		batch: func(epoch uint64, end int64) storedBatch {
			return storedBatch{epoch: epoch, end: end, items: map[string]int64{}}
		},
		add: func(b *storedBatch) { b.items[item] += n }})
}

// batchRead is what readBatches sums of each stored batch: cols (after its epoch and end
// offset) grouped by group, over the rows where holds (" AND ...", or empty), each row scanned
// into dest and added to the batch's B, made by batch at its first row.
type batchRead[B any] struct {
	what               string // for errors
	cols, group, where string
	dest               []any
	batch              func(epoch uint64, end int64) B
	add                func(*B)
}

// readBatches reads partition p's valid batches (outside invalid) ending in [from, to], in
// offset order, as r says: batch_items lists their items, and view_deltas is read for those in
// rounds.
func readBatches[B any](ctx context.Context, s *store, p int32, from, to int64, invalid string, r batchRead[B]) ([]B, error) {
	items, err := s.strings(ctx, fmt.Sprintf(`SELECT DISTINCT item_id FROM batch_items WHERE partition = %d AND end_offset >= %d AND end_offset <= %d`, p, from, to))
	if err != nil {
		return nil, err
	}
	byEnd := map[int64]*B{}
	var epoch uint64
	var end int64
	dest := append([]any{&epoch, &end}, r.dest...)
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		err := chclient.Each(chclient.FitList(ctx, round, 1), s.conn, fmt.Sprintf(`SELECT epoch, end_offset, %s FROM view_deltas
			WHERE item_id IN (?) AND partition = %d AND end_offset >= %d AND end_offset <= %d%s AND NOT (%s)
			GROUP BY epoch, end_offset, %s`, r.cols, p, from, to, r.where, invalid, r.group), []any{round}, func(rows driver.Rows) error {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			b := byEnd[end]
			if b == nil {
				nb := r.batch(epoch, end)
				b = &nb
				byEnd[end] = b
			}
			r.add(b)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read %s of partition %d from %d: %w", r.what, p, from, err)
		}
	}
	out := make([]B, 0, len(byEnd))
	for _, e := range slices.Sorted(maps.Keys(byEnd)) {
		out = append(out, *byEnd[e])
	}
	return out, nil
}

// eachTotal calls fn with every item's all-time views and unique-viewer estimate.
func (s *store) eachTotal(ctx context.Context, fn func(item string, views int64, unique uint64)) error {
	err := chclient.Each(ctx, s.conn, `SELECT item_id, sum(v), max(u) FROM (
			SELECT item_id, views AS v, toUInt64(0) AS u FROM views_total_by_day
			UNION ALL
			SELECT item_id, toInt64(0), viewers FROM unique_viewers_latest WHERE day = toDate(0)
		) GROUP BY item_id`, nil, func(rows driver.Rows) error {
		var item string
		var v int64
		var u uint64
		if err := rows.Scan(&item, &v, &u); err != nil {
			return err
		}
		fn(item, v, u)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read item totals: %w", err)
	}
	return nil
}

// itemTotals reads the all-time views of items.
func (s *store) itemTotals(ctx context.Context, items []string) (map[string]int64, error) {
	out := make(map[string]int64, len(items))
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		err := chclient.Pairs(chclient.FitList(ctx, round, 1), s.conn, `SELECT item_id, toInt64(sum(views)) FROM views_total_by_day WHERE item_id IN (?) GROUP BY item_id`,
			[]any{round}, func(item string, n int64) { out[item] = n })
		if err != nil {
			return nil, fmt.Errorf("read totals of %d items: %w", len(round), err)
		}
	}
	return out, nil
}
