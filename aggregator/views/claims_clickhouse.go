package views

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/fence"
)

// viewColumns are the end-offset columns of a views batch, for its fence.
var viewColumns = []string{"end_offset"}

// writeBatchItems records the items of every pending batch of parts under the batch's end offset
// and epoch. Written before the deltas; rewriting the same rows is harmless.
func (s *store) writeBatchItems(ctx context.Context, parts []*partition, now time.Time) error {
	b := &s.blocks.items
	b.Lock()
	defer b.Unlock()
	for _, p := range parts {
		b.add(p, now)
	}
	if err := b.send(ctx, s.conn); err != nil {
		return fmt.Errorf("insert batch items: %w", err)
	}
	return nil
}

// batchRef names one batch of a partition.
type batchRef struct {
	epoch uint64
	end   int64
}

func (b batchRef) String() string { return fmt.Sprintf("epoch %d end %d", b.epoch, b.end) }

// sql selects the batch's rows of a table of its partition.
func (b batchRef) sql() string {
	return fmt.Sprintf("(epoch = %d AND end_offset = %d)", b.epoch, b.end)
}

// itemsOf returns the distinct items of partition p's batches that end in (from, to], and of
// the batches in extra.
func (s *store) itemsOf(ctx context.Context, p int32, from, to int64, extra []batchRef) ([]string, error) {
	cond := fmt.Sprintf("(end_offset > %d AND end_offset <= %d)", from, to)
	for _, b := range extra {
		cond += " OR " + b.sql()
	}
	return s.strings(ctx, fmt.Sprintf(`SELECT DISTINCT item_id FROM batch_items WHERE partition = %d AND (%s)`, p, cond))
}

// legacyItems returns every item partition p's deltas hold: batches written before batch_items
// existed left no other trace of their items.
func (s *store) legacyItems(ctx context.Context, p int32) ([]string, error) {
	return s.strings(ctx, fmt.Sprintf(`SELECT DISTINCT item_id FROM view_deltas WHERE partition = %d AND item_id != ''`, p))
}

func (s *store) strings(ctx context.Context, q string) ([]string, error) {
	var out []string
	err := chclient.Each(ctx, s.conn, q, nil, func(rows driver.Rows) error {
		var v string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("query %.60s: %w", q, err)
	}
	return out, nil
}

// zombieBatches returns, by partition, the batches of each partition p of after that end after
// offset after[p], written under an epoch older than p's, that p's fence makes invalid; one
// statement for them all. batch_items finds them without scanning the deltas; a candidate whose
// deltas never arrived is harmless to undo.
func (s *store) zombieBatches(ctx context.Context, after map[*partition]int64) (map[int32][]batchRef, error) {
	if len(after) == 0 {
		return nil, nil
	}
	conds := make([]string, 0, len(after))
	fences := make(map[int32]fence.Fence, len(after))
	for p, from := range after {
		conds = append(conds, fmt.Sprintf("(partition = %d AND end_offset > %d AND epoch < %d)", p.id, from, p.epoch))
		fences[p.id] = p.fence
	}
	out := map[int32][]batchRef{}
	err := chclient.Each(ctx, s.conn, fmt.Sprintf(`SELECT DISTINCT partition, epoch, end_offset FROM batch_items WHERE %s`, strings.Join(conds, " OR ")),
		nil, func(rows driver.Rows) error {
			var p uint16
			var b batchRef
			if err := rows.Scan(&p, &b.epoch, &b.end); err != nil {
				return err
			}
			if !fences[int32(p)].Valid(b.epoch, b.end) {
				out[int32(p)] = append(out[int32(p)], b)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("find batches of older epochs of %d partitions: %w", len(after), err)
	}
	return out, nil
}

// newestBatchEpoch returns the newest epoch partition p's batch_items carry (0: none). The
// table's sort key starts with (partition, epoch), so the engine reads the last rows only.
func (s *store) newestBatchEpoch(ctx context.Context, p int32) (uint64, error) {
	var e uint64
	err := s.conn.QueryRow(ctx, `SELECT max(epoch) FROM (SELECT epoch FROM batch_items WHERE partition = ? ORDER BY epoch DESC LIMIT 1)`, uint16(p)).Scan(&e)
	if err != nil {
		return 0, fmt.Errorf("read the newest batch epoch of partition %d: %w", p, err)
	}
	return e, nil
}

// history is what batch_items says of partition p's valid batches (those outside invalid, the
// claims so far) when view_deltas holds no marker of it: the highest end offset it lists, and
// the highest end offset of a batch proven written (0: none), that is of a batch that is not its
// epoch's last: an owner writes the items of its next batch only after the deltas of the one
// before succeeded, and a valid batch's deltas are never dropped by the statement's fence
// (package fence). Invalid batches are left out: they were undone, or their deltas never
// landed (a zombie writes its next batch's items before its fenced deltas are dropped), so they
// prove nothing counted.
func (s *store) history(ctx context.Context, p int32, invalid string) (itemsEnd, written int64, err error) {
	err = s.conn.QueryRow(ctx, fmt.Sprintf(`WITH valid AS (SELECT epoch, end_offset FROM batch_items WHERE partition = ? AND NOT (%s))
		SELECT
			(SELECT max(end_offset) FROM valid),
			(SELECT max(b.end_offset) FROM valid AS b
				INNER JOIN (SELECT epoch, max(end_offset) AS last FROM valid GROUP BY epoch) AS l ON b.epoch = l.epoch
				WHERE b.end_offset < l.last)`, invalid),
		uint16(p)).Scan(&itemsEnd, &written)
	if err != nil {
		return 0, 0, fmt.Errorf("read the batch history of partition %d: %w", p, err)
	}
	return itemsEnd, written, nil
}

// lostBatches returns, for those of items that have any, partition p's batches whose deltas
// view_deltas must hold but does not (the table was dropped and re-created, or truncated): a
// batch listed in batch_items is lost when
//   - it is valid (invalid batches are a zombie's: fenced by their statement, or undone after
//     their buckets were corrected), of an older epoch than the owner's (valid, so at or below a
//     later claim's start, which that owner read from a marker: every batch up to it was
//     written) or of the owner's own at or below its checkpoint flushed (written by this
//     process);
//   - it was written since markersFrom, so that its marker, stamped with the same time, cannot
//     have been removed by the deltas' TTL;
//   - and its marker is missing.
//
// A batch whose deltas never arrived (a crash before them) is its epoch's last, beyond the next
// claim's start, so invalid, and not taken for lost: its records went into later batches.
func (s *store) lostBatches(ctx context.Context, p *partition, items []string, markersFrom time.Time) (map[string][]batchRef, error) {
	out := map[string][]batchRef{}
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		err := chclient.Each(chclient.FitList(ctx, round, 1), s.conn, fmt.Sprintf(`SELECT DISTINCT item_id, epoch, end_offset FROM batch_items
			WHERE partition = %[1]d AND item_id IN (?) AND written_at >= toDateTime(%[2]d) AND end_offset > 0
				AND (epoch < %[3]d OR (epoch = %[3]d AND end_offset <= %[4]d)) AND NOT (%[5]s)
				AND (epoch, end_offset) NOT IN (SELECT epoch, end_offset FROM view_deltas WHERE item_id = '' AND partition = %[1]d)`,
			p.id, markersFrom.Unix(), p.epoch, p.flushed, p.fence.AnyInvalidSQL()), []any{round}, func(rows driver.Rows) error {
			var item string
			var b batchRef
			if err := rows.Scan(&item, &b.epoch, &b.end); err != nil {
				return err
			}
			out[item] = append(out[item], b)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("look for batches of partition %d missing from view_deltas: %w", p.id, err)
		}
	}
	return out, nil
}
