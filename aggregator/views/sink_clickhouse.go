package views

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/axiomhq/hyperloglog"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/fence"
	"github.com/tallypipeline/tally/schemas/dedupe"
	"github.com/tallypipeline/tally/schemas/viewersketch"
)

// store reads and writes the views tables (schemas/migrations/001_views.sql).
type store struct {
	conn   driver.Conn
	dead   *deadletter.Writer
	blocks blocks
}

// checkpoint is where a partition resumes: the end offset of its last valid batch, the
// watermark of its dedupe window at that point, the offset up to which its rollups were known
// complete when that batch was written (-1 for batches from before that was recorded), the
// offset below which its records are in the stored sketches (0 when none were written, so that
// the replay starts at the beginning), the offset up to which its sketch deltas are folded,
// the highest of those two that the claims leave valid (proof that batches up to it were
// written), and the newest epoch its markers carry (an invalid marker's epoch is older than a
// claim's, so the valid ones have the newest).
type checkpoint struct {
	end       int64
	watermark int64
	rolled    int64
	found     bool
	sketched  int64
	folded    int64
	vouched   int64
	epoch     uint64
}

// loadCheckpoint reads partition p's checkpoint from the markers of its valid batches. The
// sketches resume at the highest sketch checkpoint, valid or not: a displaced owner's sketch
// deltas hold real viewers of real records. Only a valid one vouches for written batches
// (migration 027); rows from before it carry epoch 0 and vouch as they did.
func (s *store) loadCheckpoint(ctx context.Context, p int32, f fence.Fence) (checkpoint, error) {
	var cp checkpoint
	var n uint64
	invalid := f.InvalidSQL()
	err := s.conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(), max(end_offset), argMax(toUnixTimestamp64Milli(watermark), end_offset),
			argMax(rolled_up_to, end_offset), (SELECT max(end_offset) FROM sketch_checkpoints WHERE partition = ?),
			(SELECT max(end_offset) FROM sketch_folds WHERE partition = ?),
			(SELECT max(end_offset) FROM (SELECT epoch, end_offset FROM sketch_checkpoints WHERE partition = ?
				UNION ALL SELECT epoch, end_offset FROM sketch_folds WHERE partition = ?) WHERE epoch = 0 OR NOT (%s)),
			max(epoch)
		FROM view_deltas WHERE item_id = '' AND partition = ? AND NOT (%s)`, invalid, invalid),
		uint16(p), uint16(p), uint16(p), uint16(p), uint16(p)).Scan(&n, &cp.end, &cp.watermark, &cp.rolled, &cp.sketched, &cp.folded, &cp.vouched, &cp.epoch)
	if err != nil {
		return cp, fmt.Errorf("load checkpoint of partition %d: %w", p, err)
	}
	cp.found = n > 0
	if !cp.found {
		cp.rolled = cp.end
	}
	return cp, nil
}

// loadUnfolded returns the keys of partition p's sketch deltas written after its fold
// checkpoint: a new owner folds them, whether or not it sees their items again, before the
// deltas' TTL drops them.
func (s *store) loadUnfolded(ctx context.Context, p int32, folded int64) ([]sketchKey, error) {
	var keys []sketchKey
	err := chclient.Each(ctx, s.conn, `SELECT DISTINCT item_id, toUInt32(day) FROM unique_viewer_deltas
		WHERE partition = ? AND end_offset > ?`, []any{uint16(p), folded}, func(rows driver.Rows) error {
		var k sketchKey
		var day uint32
		if err := rows.Scan(&k.item, &day); err != nil {
			return err
		}
		k.day = int32(day)
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find unfolded sketch deltas of partition %d: %w", p, err)
	}
	return keys, nil
}

// offsetRow is one partition's checkpoint row: its offset, under the epoch it was written in.
type offsetRow struct {
	partition int32
	epoch     uint64
	end       int64
}

// writeSketchCheckpoints records that the sketches of each partition of rows (their folds and
// deltas) hold every record below its end. Like the sketches, the rows count only while no newer
// owner claimed the partition (migration 010): a displaced owner's checkpoint could vouch for
// viewers that the stored sketches, the new owner's, do not hold.
func (s *store) writeSketchCheckpoints(ctx context.Context, rows []offsetRow, now time.Time) error {
	return s.writeOffsets(ctx, "sketch_checkpoints_claimed", "sketch checkpoint", rows, now)
}

// writeFoldCheckpoints records that every sketch delta of parts up to the end of their fold
// cycle is in unique_viewers, fenced like the sketch checkpoints.
func (s *store) writeFoldCheckpoints(ctx context.Context, parts []*partition, now time.Time) error {
	rows := make([]offsetRow, len(parts))
	for i, p := range parts {
		rows[i] = offsetRow{p.id, p.epoch, p.foldFrom}
	}
	return s.writeOffsets(ctx, "sketch_folds_claimed", "fold checkpoint", rows, now)
}

func (s *store) writeOffsets(ctx context.Context, table, what string, rows []offsetRow, now time.Time) error {
	return chclient.Insert(ctx, s.conn, what+"s", "INSERT INTO "+table+" (partition, epoch, end_offset, written_at)", func(add func(...any) error) error {
		for _, r := range rows {
			if err := add(uint16(r.partition), r.epoch, r.end, now); err != nil {
				return fmt.Errorf("partition %d: %w", r.partition, err)
			}
		}
		return nil
	})
}

// loadDedupe restores into win every view counted in batches up to end that is still held (a
// pair may hold several) and returns how many pairs it holds. A replayed batch may have written
// the same counted view twice; restoring it twice changes nothing.
func (s *store) loadDedupe(ctx context.Context, p int32, end int64, win *dedupe.Window) (int, error) {
	since := win.LiveSince()
	err := chclient.Pairs(ctx, s.conn, `SELECT DISTINCT pair, last FROM dedupe_batches ARRAY JOIN pairs AS pair, last_ms AS last
		WHERE partition = ? AND end_offset <= ? AND newest_ms >= ? AND last >= ?`, []any{uint16(p), end, since, since}, win.RestorePair)
	if err != nil {
		return win.Len(), fmt.Errorf("load dedupe state of partition %d: %w", p, err)
	}
	return win.Len(), nil
}

func (s *store) writeDedupe(ctx context.Context, parts []*partition) error {
	b := &s.blocks.dedupe
	b.Lock()
	defer b.Unlock()
	for _, p := range parts {
		b.add(p)
	}
	if err := b.send(ctx, s.conn); err != nil {
		return fmt.Errorf("insert dedupe state: %w", err)
	}
	return nil
}

// loadSketches merges the stored version of every sketch not yet loaded into it, so that what
// is written next is a superset of what is stored. The stored version is the item's row in
// unique_viewers and, for the keys an earlier owner left unfolded (partition.inherited), its
// deltas after the partition's fold checkpoint. Asking for the deltas of every new sketch cost
// a lookup per item into a table that grows with the catalog, finding nothing.
func (s *store) loadSketches(ctx context.Context, parts []*partition) error {
	want, wantDeltas := map[string][]*partition{}, map[string][]*partition{}
	for _, p := range parts {
		for _, sk := range p.unloaded {
			k := sk.key
			if sk.loaded || sk.evicted {
				continue
			}
			if !slices.Contains(want[k.item], p) {
				want[k.item] = append(want[k.item], p)
			}
			if p.inherited[k] && !slices.Contains(wantDeltas[k.item], p) {
				wantDeltas[k.item] = append(wantDeltas[k.item], p)
			}
		}
	}
	if len(want) == 0 {
		for _, p := range parts {
			p.loadedAll()
		}
		return nil
	}
	// After an assignment every item of the partition is unloaded: read them in bounded rounds,
	// sorted, so that each round asks for one range of the tables' keys (item_id) and the
	// primary indexes skip the rest instead of every round reading the whole tables.
	items := slices.Sorted(maps.Keys(want))
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		if err := s.mergeStored(ctx, round, want); err != nil {
			return err
		}
		if err := s.mergeDeltas(ctx, round, wantDeltas); err != nil {
			return err
		}
	}
	for _, p := range parts {
		p.loadedAll()
	}
	return nil
}

// mergeStored merges the whole stored sketches of items into the partitions' in-memory ones. A
// stored sketch that does not read back is set aside (deadletter.go) and not merged: the next
// fold replaces it with the in-memory sketch, newer, so that one bad row cannot stop sketch
// writes.
func (s *store) mergeStored(ctx context.Context, items []string, want map[string][]*partition) error {
	var setAside []deadletter.Letter
	err := chclient.Each(chclient.FitList(ctx, items, 1), s.conn, `SELECT item_id, toUInt32(day), argMax(sketch, updated_at),
			toUnixTimestamp64Micro(max(updated_at)) FROM unique_viewers
		WHERE item_id IN (?) GROUP BY item_id, day`, []any{items}, func(rows driver.Rows) error {
		var item string
		var day uint32
		var blob string
		var version int64
		if err := rows.Scan(&item, &day, &blob, &version); err != nil {
			return err
		}
		k := sketchKey{item, int32(day)}
		bad, err := mergeInto(want[item], k, blob, nil)
		if err != nil {
			return err
		}
		if bad != nil {
			setAside = append(setAside, badSketch(sourceUniqueViewers, -1, version, k, blob, bad, "replaced by a fresh sketch"))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load sketches of %d items: %w", len(items), err)
	}
	return s.dead.Write(ctx, s.conn, setAside)
}

// mergeDeltas merges into the in-memory sketches of those of items that want names the sketch
// deltas of their partitions after each one's fold checkpoint (those up to it are in
// unique_viewers). A delta that does not read back is set aside and skipped.
func (s *store) mergeDeltas(ctx context.Context, round []string, want map[string][]*partition) error {
	var ids []uint16
	var folded []int64
	var items []string
	seen := map[*partition]bool{}
	for _, item := range round {
		if len(want[item]) > 0 {
			items = append(items, item)
		}
		for _, p := range want[item] {
			if !seen[p] {
				seen[p] = true
				ids, folded = append(ids, uint16(p.id)), append(folded, p.folded)
			}
		}
	}
	if len(items) == 0 {
		return nil
	}
	var setAside []deadletter.Letter
	err := chclient.Each(chclient.FitList(ctx, items, 1), s.conn, `SELECT partition, end_offset, item_id, toUInt32(day), sketch
		FROM unique_viewer_deltas
		WHERE partition IN (?) AND item_id IN (?) AND end_offset > arrayElement(?, indexOf(?, partition))`,
		[]any{ids, items, folded, ids}, func(rows driver.Rows) error {
			var part uint16
			var end int64
			var item string
			var day uint32
			var blob string
			if err := rows.Scan(&part, &end, &item, &day, &blob); err != nil {
				return err
			}
			k := sketchKey{item, int32(day)}
			bad, err := mergeInto(want[item], k, blob, func(p *partition) bool { return p.id == int32(part) })
			if err != nil {
				return err
			}
			if bad != nil {
				setAside = append(setAside, badSketch(sourceUniqueViewerDeltas, int32(part), end, k, blob, bad, "skipped"))
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("load sketch deltas of %d items: %w", len(items), err)
	}
	return s.dead.Write(ctx, s.conn, setAside)
}

// mergeInto merges blob, a stored sketch of k, into the unloaded in-memory sketch of k of each
// of parts that of accepts (all when nil). It returns the decoding error of a blob that does not
// read back, having merged nothing.
func mergeInto(parts []*partition, k sketchKey, blob string, of func(*partition) bool) (bad, err error) {
	var stored *hyperloglog.Sketch
	for _, p := range parts {
		sk := p.sketches[k]
		if sk == nil || sk.loaded || of != nil && !of(p) {
			continue
		}
		if stored == nil {
			if stored, bad = viewersketch.Decode([]byte(blob)); bad != nil {
				return bad, nil
			}
		}
		if err := sk.viewers.dense().Merge(stored); err != nil {
			return nil, fmt.Errorf("merge stored sketch of %s day %d: %w", k.item, k.day, err)
		}
		sk.estimate = 0 // to be computed again
	}
	return nil, nil
}

// sketchRow is one row of unique_viewer_deltas: a sketch's viewers added since its last delta
// write (encoded into blob by encodeSketchRows) and the whole sketch's estimate.
type sketchRow struct {
	partition int32
	epoch     uint64
	end       int64
	key       sketchKey
	delta     viewerDelta
	blob      string
	viewers   uint64
}

// sketchDeltaRows returns, for every sketch of parts that owes a row (owesRow), the viewers it
// added since its last delta write, with the estimate of the whole sketch, tagged with the
// partition's offset and epoch; a sketch that only owes an estimate gets an empty delta. A final
// write (estimateDue) carries every estimate owed. It also
// returns the all-time estimates, by item. It reads the sketches, so it runs under the
// aggregator's lock; the rows are encoded and written without it (encodeSketchRows,
// insertSketchDeltas).
func sketchDeltaRows(parts []*partition, now time.Time, final bool) ([]sketchRow, map[string]uint64) {
	n := 0
	for _, p := range parts {
		n += len(p.listed)
	}
	rows := make([]sketchRow, 0, n)
	est := make(map[string]uint64, n/2)
	for _, p := range parts {
		for _, sk := range p.listed {
			if sk.evicted || !sk.owesRow(now, final) {
				continue
			}
			n := sk.current(now, final)
			rows = append(rows, sketchRow{partition: p.id, epoch: p.epoch, end: p.next, key: sk.key, delta: sk.delta, viewers: n})
			if sk.key.day == allTime {
				est[sk.key.item] = n
			}
		}
	}
	return rows, est
}

// encodeSketchRows encodes the delta of each row not yet encoded into its blob (an encoded sketch
// is never empty), so that a retried write encodes nothing again. A delta of hashes goes through
// one scratch sketch, reset for each: fewer than deltaHashes keep it sparse, as a new one.
func encodeSketchRows(rows []sketchRow) error {
	scratch := hyperloglog.New14()
	var buf []byte
	var err error
	for i := range rows {
		r := &rows[i]
		if r.blob != "" {
			continue
		}
		sk := r.delta.hll
		if sk == nil {
			scratch.Reset()
			for _, h := range r.delta.hashes {
				scratch.InsertHash(h)
			}
			sk = scratch
		}
		if buf, err = sk.AppendBinary(buf[:0]); err != nil {
			return fmt.Errorf("encode sketch delta of %s: %w", r.key.item, err)
		}
		r.blob = string(buf)
	}
	return nil
}

// insertSketchDeltas encodes rows and stores them. They count only while no newer owner claimed
// their partition (migration 012).
func (s *store) insertSketchDeltas(ctx context.Context, rows []sketchRow, now time.Time) error {
	if len(rows) == 0 {
		return nil
	}
	if err := encodeSketchRows(rows); err != nil {
		return err
	}
	b := &s.blocks.sketches
	b.Lock()
	defer b.Unlock()
	for i := range rows {
		b.add(&rows[i], now)
	}
	if err := b.send(ctx, s.conn); err != nil {
		return fmt.Errorf("insert sketch deltas: %w", err)
	}
	return nil
}

// writeFolds stores the whole sketches of folds, each tagged with its partition and epoch: the
// rows count only while no newer owner claimed the partition (migration 010). A displaced
// owner's sketch is stale and stamped later than the new owner's, so it would win every read
// until the new owner folds that item again.
func (s *store) writeFolds(ctx context.Context, folds map[*partition][]sketchKey, now time.Time) error {
	const insert = "INSERT INTO unique_viewers_claimed (partition, epoch, item_id, day, sketch, viewers, updated_at)"
	return chclient.Insert(ctx, s.conn, "sketches", insert, func(add func(...any) error) error {
		for p, keys := range folds {
			for _, k := range keys {
				sk := p.sketches[k]
				blob, err := sk.viewers.marshal()
				if err != nil {
					return fmt.Errorf("encode the sketch of %s: %w", k.item, err)
				}
				// A fold writes the sketch's own figure, whether or not an estimate is due.
				if err := add(uint16(p.id), p.epoch, k.item, dayOf(k), string(blob), sk.estimateNow(now), now); err != nil {
					return fmt.Errorf("the sketch of %s: %w", k.item, err)
				}
			}
		}
		return nil
	})
}

func dayOf(k sketchKey) time.Time { return time.Unix(int64(k.day)*86400, 0).UTC() }

// writeDeltas writes the batches of parts and their checkpoint markers in one INSERT block,
// which ClickHouse makes visible all at once. Every row carries the epoch it was written under
// and the partition's rollup checkpoint (rolled_up_to) at that moment. The block goes through
// view_deltas_claimed, whose materialized view drops the rows of a partition claimed by a newer
// owner since: the fence is checked inside the statement, so no stall of this process between a
// check and the INSERT can let a displaced owner's batch in.
func (s *store) writeDeltas(ctx context.Context, parts []*partition, now time.Time) error {
	return s.writeDeltasInto(ctx, "view_deltas_claimed", parts, now)
}

// writeDeltasInto is writeDeltas into table; tests write into view_deltas itself to stand for a
// ClickHouse server committing a statement whose fence check ran just before a claim.
func (s *store) writeDeltasInto(ctx context.Context, table string, parts []*partition, now time.Time) error {
	b := &s.blocks.deltas
	b.Lock()
	defer b.Unlock()
	for _, p := range parts {
		b.add(p, now)
	}
	if err := b.send(ctx, s.conn, table); err != nil {
		return fmt.Errorf("insert deltas: %w", err)
	}
	return nil
}
