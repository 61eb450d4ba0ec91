package reconcile

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// writeReport stores rep as a new version: one above every version in either table (diff rows
// of a run that died before its run row must not be adopted by the next run). Diff rows go
// first and the run row last, so a run row means its report is complete. Rows are only ever
// added: a rerun never changes an earlier version.
func writeReport(ctx context.Context, conn driver.Conn, rep Report) (uint64, error) {
	var version uint64
	if err := conn.QueryRow(ctx, `SELECT greatest(
		(SELECT max(version) FROM like_reconciliation_runs),
		(SELECT max(version) FROM like_reconciliation_diffs)) + 1`).Scan(&version); err != nil {
		return 0, fmt.Errorf("read last like reconciliation version: %w", err)
	}
	if len(rep.Diffs) > 0 {
		b, err := conn.PrepareBatch(ctx, "INSERT INTO like_reconciliation_diffs (version, item_id, source, expected, actual, diff, repaired)")
		if err != nil {
			return 0, fmt.Errorf("prepare like reconciliation diffs insert: %w", err)
		}
		defer b.Abort()
		for _, d := range rep.Diffs {
			repaired := uint8(0)
			if d.Repaired {
				repaired = 1
			}
			if err := b.Append(version, d.ItemID, d.Source, d.Expected, d.Actual, d.Actual-d.Expected, repaired); err != nil {
				return 0, fmt.Errorf("append like reconciliation diff of %s: %w", d.ItemID, err)
			}
		}
		if err := b.Send(); err != nil {
			return 0, fmt.Errorf("insert like reconciliation diffs of version %d: %w", version, err)
		}
	}
	err := conn.Exec(ctx, `INSERT INTO like_reconciliation_runs
		(version, started_at, finished_at, scope, items_checked, differences, repaired) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		version, rep.StartedAt, rep.FinishedAt, rep.Scope, rep.ItemsChecked, rep.Differences, rep.Repaired)
	if err != nil {
		return 0, fmt.Errorf("insert like reconciliation run of version %d: %w", version, err)
	}
	return version, nil
}
