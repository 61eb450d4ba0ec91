package views

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/axiomhq/hyperloglog"

	"tally/platform/chclient"
	"tally/schemas/dedupe"
)

// store reads and writes the views tables (schemas/migrations/001_views.sql).
type store struct {
	conn driver.Conn
	dead *deadLetters
}

// checkpoint is where a partition resumes: the end offset of its last valid batch, the
// watermark of its dedupe window at that point, the offset up to which its rollups were known
// complete when that batch was written (-1 for batches from before that was recorded), and the
// offset below which its records are in the stored sketches (0 when none were written, so that
// the replay starts at the beginning).
type checkpoint struct {
	end       int64
	watermark int64
	rolled    int64
	found     bool
	sketched  int64
}

// loadCheckpoint reads partition p's checkpoint from the markers of its valid batches.
func (s *store) loadCheckpoint(ctx context.Context, p int32, f fence) (checkpoint, error) {
	var cp checkpoint
	var n uint64
	err := s.conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(), max(end_offset), argMax(toUnixTimestamp64Milli(watermark), end_offset),
			argMax(rolled_up_to, end_offset), (SELECT max(end_offset) FROM sketch_checkpoints WHERE partition = ?)
		FROM view_deltas WHERE item_id = '' AND partition = ? AND NOT (%s)`, f.invalidSQL(f.epochs())),
		uint16(p), uint16(p)).Scan(&n, &cp.end, &cp.watermark, &cp.rolled, &cp.sketched)
	if err != nil {
		return cp, fmt.Errorf("load checkpoint of partition %d: %w", p, err)
	}
	cp.found = n > 0
	if !cp.found {
		cp.rolled = cp.end
	}
	return cp, nil
}

// writeSketchCheckpoints records that the sketches of parts hold every record below their
// next offset. Like the sketches, the rows count only while no newer owner claimed the
// partition (migration 006): a displaced owner's checkpoint could vouch for viewers that the
// stored sketches, the new owner's, do not hold.
func (s *store) writeSketchCheckpoints(ctx context.Context, parts []*partition, now time.Time) error {
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO sketch_checkpoints_claimed (partition, epoch, end_offset, written_at)")
	if err != nil {
		return fmt.Errorf("prepare sketch checkpoint insert: %w", err)
	}
	defer b.Abort()
	for _, p := range parts {
		if err := b.Append(uint16(p.id), p.epoch, p.next, now); err != nil {
			return fmt.Errorf("append sketch checkpoint of partition %d: %w", p.id, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert sketch checkpoints: %w", err)
	}
	return nil
}

// loadDedupe restores into win every view counted in batches up to end that is still held (a
// pair may hold several) and returns how many pairs it holds. A replayed batch may have written
// the same counted view twice; restoring it twice changes nothing.
func (s *store) loadDedupe(ctx context.Context, p int32, end int64, win *dedupe.Window) (int, error) {
	rows, err := s.conn.Query(ctx, `SELECT DISTINCT pair, last_ms FROM dedupe_state
		WHERE partition = ? AND end_offset <= ? AND last_ms >= ?`, uint16(p), end, win.LiveSince())
	if err != nil {
		return 0, fmt.Errorf("load dedupe state of partition %d: %w", p, err)
	}
	defer rows.Close()
	for rows.Next() {
		var pair uint64
		var t int64
		if err := rows.Scan(&pair, &t); err != nil {
			return win.Len(), fmt.Errorf("scan dedupe state of partition %d: %w", p, err)
		}
		win.RestorePair(pair, t)
	}
	if err := rows.Err(); err != nil {
		return win.Len(), fmt.Errorf("read dedupe state of partition %d: %w", p, err)
	}
	return win.Len(), nil
}

func (s *store) writeDedupe(ctx context.Context, parts []*partition) error {
	if err := s.dead.writePending(ctx, s.conn, parts); err != nil {
		return err
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO dedupe_state (partition, end_offset, pair, last_ms)")
	if err != nil {
		return fmt.Errorf("prepare dedupe state insert: %w", err)
	}
	defer b.Abort()
	for _, p := range parts {
		for _, r := range p.counted {
			if err := b.Append(uint16(p.id), p.next, r.pair, r.last); err != nil {
				return fmt.Errorf("append dedupe state of partition %d: %w", p.id, err)
			}
		}
	}
	if b.Rows() == 0 {
		return nil
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert dedupe state: %w", err)
	}
	return nil
}

// loadSketches merges the stored version of every dirty sketch not yet loaded into it, so that
// what is written next is a superset of what is stored.
func (s *store) loadSketches(ctx context.Context, parts []*partition) error {
	want := map[string][]*partition{}
	for _, p := range parts {
		for k, sk := range p.sketches {
			if sk.dirty && !sk.loaded {
				want[k.item] = append(want[k.item], p)
			}
		}
	}
	if len(want) == 0 {
		return nil
	}
	// After an assignment every item of the partition is unloaded: read them in bounded rounds,
	// sorted, so that each round asks for one range of the table's key (item_id) and the primary
	// index skips the rest instead of every round reading the whole table.
	items := slices.Sorted(maps.Keys(want))
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		if err := s.mergeStored(ctx, round, want); err != nil {
			return err
		}
	}
	for _, p := range parts {
		for _, sk := range p.sketches {
			if sk.dirty {
				sk.loaded = true
			}
		}
	}
	return nil
}

// mergeStored merges the stored sketches of items into the partitions' in-memory ones. A stored
// sketch that does not read back is set aside (deadletter.go) and not merged: the next write
// replaces it with the in-memory sketch, newer, so that one bad row cannot stop sketch writes.
func (s *store) mergeStored(ctx context.Context, items []string, want map[string][]*partition) error {
	rows, err := s.conn.Query(chclient.FitList(ctx, items, 1), `SELECT item_id, toUInt32(day), argMax(sketch, updated_at),
			toUnixTimestamp64Micro(max(updated_at)) FROM unique_viewers
		WHERE item_id IN (?) GROUP BY item_id, day`, items)
	if err != nil {
		return fmt.Errorf("load sketches of %d items: %w", len(items), err)
	}
	defer rows.Close()
	var setAside []deadLetter
	for rows.Next() {
		var item string
		var day uint32
		var blob string
		var version int64
		if err := rows.Scan(&item, &day, &blob, &version); err != nil {
			return fmt.Errorf("scan sketch: %w", err)
		}
		var stored *hyperloglog.Sketch
		var bad error
		for _, p := range want[item] {
			sk := p.sketches[sketchKey{item, int32(day)}]
			if sk == nil || sk.loaded {
				continue
			}
			if stored == nil && bad == nil {
				if stored, bad = decodeStoredSketch([]byte(blob)); bad != nil {
					setAside = append(setAside, badSketch(item, day, version, blob, bad))
				}
			}
			if bad != nil {
				continue
			}
			if err := sk.hll.Merge(stored); err != nil {
				return fmt.Errorf("merge stored sketch of %s day %d: %w", item, day, err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read sketches: %w", err)
	}
	rows.Close()
	return s.dead.write(ctx, s.conn, setAside)
}

// writeSketches stores the dirty sketches of parts, each tagged with its partition and epoch:
// the rows count only while no newer owner claimed the partition (migration 006). A displaced
// owner's sketch is stale and stamped later than the new owner's, so it would win every read
// until the new owner writes that item again.
func (s *store) writeSketches(ctx context.Context, parts []*partition, now time.Time) error {
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO unique_viewers_claimed (partition, epoch, item_id, day, sketch, viewers, updated_at)")
	if err != nil {
		return fmt.Errorf("prepare sketch insert: %w", err)
	}
	defer b.Abort()
	for _, p := range parts {
		for k, sk := range p.sketches {
			if !sk.dirty {
				continue
			}
			blob, err := sk.hll.MarshalBinary()
			if err != nil {
				return fmt.Errorf("encode sketch of %s: %w", k.item, err)
			}
			day := time.Unix(int64(k.day)*86400, 0).UTC()
			if err := b.Append(uint16(p.id), p.epoch, k.item, day, string(blob), sk.hll.Estimate(), now); err != nil {
				return fmt.Errorf("append sketch of %s: %w", k.item, err)
			}
		}
	}
	if b.Rows() == 0 {
		return nil
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert sketches: %w", err)
	}
	return nil
}

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
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+table+" (partition, end_offset, watermark, item_id, second, views, epoch, rolled_up_to)")
	if err != nil {
		return fmt.Errorf("prepare deltas insert: %w", err)
	}
	defer b.Abort()
	for _, p := range parts {
		wm := time.UnixMilli(p.win.Watermark()).UTC()
		if err := b.Append(uint16(p.id), p.next, wm, "", now, uint64(0), p.epoch, p.rolled); err != nil {
			return fmt.Errorf("append checkpoint of partition %d: %w", p.id, err)
		}
		for k, n := range p.deltas {
			if err := b.Append(uint16(p.id), p.next, wm, k.item, time.Unix(k.second, 0).UTC(), n, p.epoch, p.rolled); err != nil {
				return fmt.Errorf("append deltas of partition %d: %w", p.id, err)
			}
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert deltas: %w", err)
	}
	return nil
}

// batchWritten reports whether the batch of partition p ending at end is stored: after an
// error whose outcome is unknown (a timeout after the server committed), retrying it blindly
// would count it twice.
func (s *store) batchWritten(ctx context.Context, p int32, end int64) (bool, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, `SELECT count() FROM view_deltas WHERE item_id = '' AND partition = ? AND end_offset = ?`,
		uint16(p), end).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up batch of partition %d ending at %d: %w", p, end, err)
	}
	return n > 0, nil
}
