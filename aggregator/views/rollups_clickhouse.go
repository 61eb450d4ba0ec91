package views

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
)

// rollup is one table that sums the deltas per item and time bucket.
type rollup struct {
	table  string
	column string // the bucket column
	expr   string // the bucket of view_deltas.second, in SQL
	width  int64  // bucket width in seconds
}

// rollups lists the tables derived from view_deltas. views_total_by_day keeps every day;
// views_total and views_by_day are views of it.
func rollups() []rollup {
	return []rollup{
		{"views_by_minute", "minute", "toStartOfMinute(second)", 60},
		{"views_by_hour", "hour", "toStartOfHour(second)", 3600},
		{"views_total_by_day", "day", "toDate(second)", 86400},
	}
}

// writeRollups adds the batches of parts to every rollup in one INSERT into view_rollup_claimed,
// which passes the rows of partitions not claimed since under a newer epoch on to
// view_rollup_input, whose materialized views fill the three tables. One statement keeps the
// tables from being written apart by anything but a server crash inside it, and a batch whose
// rollups a crash left incomplete is found through its marker (rolled_up_to) and repaired. The
// claim is checked by the statement itself because a writer can stall between any check of its
// own and the write: rows that arrive after a newer owner's claim are dropped, and that owner's
// repair, which runs after its claim, sees everything that arrived before.
//
// On a ClickHouse cluster the rollups are Replicated tables, which drop an INSERT block
// identical to a recent one (and so do their materialized views' blocks where
// deduplicate_blocks_in_dependent_materialized_views is on, the default of recent servers). Two
// batches can carry identical rollup rows (one late view of an item in the same second), so the
// INSERT carries the batch's identity as its deduplication token: another batch's rows are
// never taken for a repeat of these.
func (s *store) writeRollups(ctx context.Context, parts []*partition) error {
	var token strings.Builder
	token.WriteString("views-rollups")
	for _, p := range parts {
		fmt.Fprintf(&token, " %d/%d/%d-%d", p.id, p.epoch, p.rolled, p.flushed)
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplication_token": token.String()}))
	b := &s.blocks.rollups
	b.Lock()
	defer b.Unlock()
	for _, p := range parts {
		b.add(p)
	}
	if err := b.send(ctx, s.conn); err != nil {
		return fmt.Errorf("insert rollups: %w", err)
	}
	return nil
}

// diffSQL compares, for rollup r, each bucket of the items bound to its two ? (the same list)
// that partition p's deltas still hold whole (from the first whole bucket at or after horizon on)
// with the sum of the valid deltas in it, and returns the buckets that differ: item_id, b (the
// bucket), w (the deltas' sum) and h (the rollup's).
func diffSQL(r rollup, p int32, invalid string, horizon time.Time) string {
	from := (horizon.Unix() + r.width - 1) / r.width * r.width // first whole bucket
	return fmt.Sprintf(`SELECT item_id, b, w, h FROM (
			SELECT item_id, b, sum(w) AS w, sum(h) AS h FROM (
				SELECT item_id, %[3]s AS b, toInt64(views) AS w, toInt64(0) AS h FROM view_deltas
				WHERE item_id IN (?) AND partition = %[4]d AND second >= toDateTime(%[5]d) AND NOT (%[6]s)
				UNION ALL
				SELECT item_id, %[2]s AS b, toInt64(0) AS w, views AS h FROM %[1]s
				WHERE item_id IN (?) AND %[2]s >= toDateTime(%[5]d)
			) GROUP BY item_id, b
		) WHERE w != h`, r.table, r.column, r.expr, p, from, invalid)
}

// repairRollups makes every rollup bucket of items that the deltas table still holds whole
// equal to the sum of the valid deltas in it, by inserting the difference (negative where a
// zombie's batch is undone). It compares before it writes, so it can be repeated, interrupted
// and run again at any moment: a bucket already right gets no row. The caller passes only items
// whose deltas are complete (lostBatches): a bucket set to deltas that lost batches would lose
// their views.
//
// Buckets are compared from horizon on: older deltas may have been removed by their TTL. The
// INSERTs write only while p has no claim newer than epoch: a repair by an owner that lost p could
// land between the new owner's deltas and its rollups and count them twice (writeRollups).
//
// Each INSERT has a deduplication token of its own: two repairs can write identical corrections
// (one view of an item in the same bucket, lost twice), which a Replicated rollup table on a
// cluster would otherwise drop as a repeat (writeRollups). A repair needs no deduplication: it
// compares before it writes.
func (s *store) repairRollups(ctx context.Context, p int32, epoch uint64, items []string, invalid string, horizon time.Time) error {
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		for _, r := range rollups() {
			// In the statement: FitList's settings would replace a token set on ctx.
			q := fmt.Sprintf(`INSERT INTO %[1]s (item_id, %[2]s, views) SETTINGS insert_deduplication_token = 'views-repair %[3]s'
				SELECT item_id, b, w - h FROM (%[4]s)
				WHERE (SELECT count() FROM partition_claims WHERE partition = %[5]d AND epoch > %[6]d) = 0`,
				r.table, r.column, rand.Text(), diffSQL(r, p, invalid, horizon), p, epoch)
			if err := s.conn.Exec(chclient.FitList(ctx, round, 2), q, round, round); err != nil {
				return fmt.Errorf("repair %s of partition %d: %w", r.table, p, err)
			}
		}
	}
	return nil
}

// rollupDiff is one rollup bucket that differs from the deltas in it.
type rollupDiff struct {
	table, item    string
	bucket         time.Time
	rollup, deltas int64
}

func (d rollupDiff) String() string {
	return fmt.Sprintf("%s %s %s: rollup %d, deltas %d", d.table, d.item, d.bucket.UTC().Format(time.DateTime), d.rollup, d.deltas)
}

// rollupDiffs returns the buckets of items that repairRollups would change, changing nothing:
// what a repair refused leaves different from the deltas.
func (s *store) rollupDiffs(ctx context.Context, p int32, items []string, invalid string, horizon time.Time) ([]rollupDiff, error) {
	var out []rollupDiff
	for round := range slices.Chunk(items, chclient.MaxListItems) {
		for _, r := range rollups() {
			err := chclient.Each(chclient.FitList(ctx, round, 2), s.conn, diffSQL(r, p, invalid, horizon)+" ORDER BY item_id, b",
				[]any{round, round}, func(rows driver.Rows) error {
					d := rollupDiff{table: r.table}
					if err := rows.Scan(&d.item, &d.bucket, &d.deltas, &d.rollup); err != nil {
						return err
					}
					out = append(out, d)
					return nil
				})
			if err != nil {
				return nil, fmt.Errorf("compare %s of partition %d with the deltas: %w", r.table, p, err)
			}
		}
	}
	return out, nil
}
