package views

import (
	"context"
	"fmt"
	"slices"
	"time"

	"tally/platform/chclient"
)

// rollup is one table that sums the deltas per item and time bucket.
type rollup struct {
	table  string
	column string // the bucket column
	expr   string // the bucket of view_deltas.second, in SQL
	width  int64  // bucket width in seconds
}

// rollups lists the tables derived from view_deltas. views_total (a view) sums
// views_total_by_day, which keeps every day.
func rollups() []rollup {
	return []rollup{
		{"views_by_minute", "minute", "toStartOfMinute(second)", 60},
		{"views_by_hour", "hour", "toStartOfHour(second)", 3600},
		{"views_by_day", "day", "toDate(second)", 86400},
		{"views_total_by_day", "day", "toDate(second)", 86400},
	}
}

type bucketKey struct {
	item   string
	bucket int64 // Unix seconds of the bucket's start
}

// writeRollups adds the batches of parts to every rollup, one INSERT per table. Each INSERT is
// one part; a crash between them leaves the batch's rollups incomplete, which the next owner
// finds through the batch's marker (rolled_up_to) and repairs.
func (s *store) writeRollups(ctx context.Context, parts []*partition) error {
	for _, r := range rollups() {
		sums := map[bucketKey]int64{}
		for _, p := range parts {
			for k, n := range p.deltas {
				b := floorDiv(k.second, r.width) * r.width
				sums[bucketKey{k.item, b}] += int64(n)
			}
		}
		if len(sums) == 0 {
			continue
		}
		b, err := s.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (item_id, %s, views)", r.table, r.column))
		if err != nil {
			return fmt.Errorf("prepare %s insert: %w", r.table, err)
		}
		for k, n := range sums {
			if err := b.Append(k.item, time.Unix(k.bucket, 0).UTC(), n); err != nil {
				b.Abort()
				return fmt.Errorf("append %s row: %w", r.table, err)
			}
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("insert %s: %w", r.table, err)
		}
	}
	return nil
}

// repairRollups makes every rollup bucket of items that the deltas table still holds whole
// equal to the sum of the valid deltas in it, by inserting the difference (negative where a
// zombie's batch is undone). It compares before it writes, so it can be repeated, interrupted
// and run again at any moment: a bucket already right gets no row.
//
// Buckets are compared from horizon on: older deltas may have been removed by their TTL.
func (s *store) repairRollups(ctx context.Context, p int32, items []string, invalid string, horizon time.Time) (int, error) {
	fixed := 0
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		for _, r := range rollups() {
			from := (horizon.Unix() + r.width - 1) / r.width * r.width // first whole bucket
			q := fmt.Sprintf(`INSERT INTO %[1]s (item_id, %[2]s, views)
				SELECT item_id, b, w - h FROM (
					SELECT item_id, b, sum(w) AS w, sum(h) AS h FROM (
						SELECT item_id, %[3]s AS b, toInt64(views) AS w, toInt64(0) AS h FROM view_deltas
						WHERE item_id IN (?) AND partition = %[4]d AND second >= toDateTime(%[5]d) AND NOT (%[6]s)
						UNION ALL
						SELECT item_id, %[2]s AS b, toInt64(0) AS w, views AS h FROM %[1]s
						WHERE item_id IN (?) AND %[2]s >= toDateTime(%[5]d)
					) GROUP BY item_id, b
				) WHERE w != h`, r.table, r.column, r.expr, p, from, invalid)
			if err := s.conn.Exec(chclient.FitList(ctx, round, 2), q, round, round); err != nil {
				return fixed, fmt.Errorf("repair %s of partition %d: %w", r.table, p, err)
			}
		}
		fixed += len(round)
	}
	return fixed, nil
}
