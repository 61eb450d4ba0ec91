package reconcile

import (
	"context"
	"fmt"
	"math"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/schemas"
)

// checkClickHouse compares the like records of items (read FINAL: the last record per pair)
// with the log's last record per pair, and repairs each differing pair: rows the log cannot
// account for (an offset below the snapshot that is not the pair's last record, or at or above
// it, up to the snapshot) are deleted, then the log's last record is inserted again. The
// ReplacingMergeTree version is the offset, so the re-inserted record wins over older rows.
func checkClickHouse(ctx context.Context, d Deps, st *logState, items []string) ([]Diff, error) {
	var diffs []Diff
	err := batches(items, 500, func(batch []string) error {
		stored, err := readRecords(ctx, d.ClickHouse, batch)
		if err != nil {
			return err
		}
		var found []Diff
		var fixes []fix
		for _, item := range batch {
			end := st.snap[st.partition[item]]
			c := compare(st.last[item], stored[item], end, true)
			if len(c.drift) == 0 {
				continue
			}
			for _, user := range c.drift {
				r, inLog := st.last[item][user]
				fixes = append(fixes, fix{item: item, user: user, rec: r, inLog: inLog, stored: stored[item][user], end: end, partition: st.partition[item]})
			}
			found = append(found, Diff{ItemID: item, Source: "clickhouse", Expected: c.expected, Actual: c.actual, Pairs: len(c.drift)})
		}
		if len(fixes) == 0 {
			return nil
		}
		repaired := repairRecords(ctx, d, fixes) == nil
		for _, df := range found {
			df.Repaired = repaired
			d.Logger.Warn("clickhouse like records differed from the log", "item_id", df.ItemID, "pairs", df.Pairs,
				"expected", df.Expected, "actual", df.Actual, "repaired", repaired)
			diffs = append(diffs, df)
		}
		return nil
	})
	return diffs, err
}

// readRecords reads the last stored record of every pair of items.
func readRecords(ctx context.Context, conn driver.Conn, items []string) (map[string]map[string]observed, error) {
	rows, err := conn.Query(ctx, "SELECT item_id, user_id, liked, offset FROM likes FINAL WHERE item_id IN (?)", items)
	if err != nil {
		return nil, fmt.Errorf("read like records of %d items: %w", len(items), err)
	}
	defer rows.Close()
	out := map[string]map[string]observed{}
	for rows.Next() {
		var item, user string
		var liked uint8
		var off int64
		if err := rows.Scan(&item, &user, &liked, &off); err != nil {
			return nil, fmt.Errorf("scan like record: %w", err)
		}
		if out[item] == nil {
			out[item] = map[string]observed{}
		}
		out[item][user] = observed{liked: liked == 1, offset: off, has: true}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read like records of %d items: %w", len(items), err)
	}
	return out, nil
}

// fix is one pair to set to the log's state.
type fix struct {
	item, user string
	rec        record
	inLog      bool
	stored     observed
	end        int64
	partition  int32
}

// repairRecords deletes the rows the log cannot account for and re-inserts the log's last
// records. Errors are logged and returned; the report marks the diff unrepaired.
func repairRecords(ctx context.Context, d Deps, fixes []fix) error {
	for _, f := range fixes {
		// A stored row at or past the log's last record, below the snapshot, is not in the log
		// (or carries a wrong state): the re-inserted record could not win over it.
		if !f.stored.has || (f.inLog && f.stored.offset < f.rec.offset) {
			continue
		}
		from := int64(math.MinInt64)
		if f.inLog {
			from = f.rec.offset
		}
		if err := d.ClickHouse.Exec(ctx, "DELETE FROM likes WHERE item_id = ? AND user_id = ? AND offset >= ? AND offset < ?",
			f.item, f.user, from, f.end); err != nil {
			d.Logger.Error("delete stray like records", "item_id", f.item, "user_id", f.user, "err", err)
			return fmt.Errorf("delete stray like records of %s/%s: %w", f.item, f.user, err)
		}
	}
	b, err := d.ClickHouse.PrepareBatch(ctx, likestate.InsertLikes)
	if err != nil {
		return fmt.Errorf("prepare like record repair: %w", err)
	}
	defer b.Abort()
	for _, f := range fixes {
		if !f.inLog {
			continue
		}
		l := schemas.Like{ItemID: f.item, UserID: f.user, Liked: f.rec.liked, TS: f.rec.ts}
		if err := likestate.AppendLike(b.Append, l, f.partition, f.rec.offset); err != nil {
			return fmt.Errorf("append like record repair of %s/%s: %w", f.item, f.user, err)
		}
	}
	if b.Rows() == 0 {
		return nil
	}
	if err := b.Send(); err != nil {
		d.Logger.Error("re-insert like records", "records", b.Rows(), "err", err)
		return fmt.Errorf("re-insert %d like records: %w", b.Rows(), err)
	}
	return nil
}
