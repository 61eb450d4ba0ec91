package clicks

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// rowsPerInsert bounds one INSERT of report rows, so a day of a million ads is a few blocks.
const rowsPerInsert = 100_000

// writeVersion stores a day's rows as a new version of the date and returns its number: one
// above every version of the date in either table, so rows of a run that died before its
// version row are never adopted. Rows go first and the version row last, in its own INSERT:
// readers find a version through its version row, so they see all of it or none. Nothing is
// ever updated or deleted: a rerun adds a version beside the earlier ones.
func writeVersion(ctx context.Context, conn driver.Conn, rep *Report, rows []Row) error {
	day := rep.Date
	var version uint32
	if err := conn.QueryRow(ctx, `SELECT toUInt32(greatest(
		(SELECT max(version) FROM click_report_versions WHERE date = ?),
		(SELECT max(version) FROM click_reports_daily WHERE date = ?)) + 1)`, day, day).Scan(&version); err != nil {
		return fmt.Errorf("read last click report version of %s: %w", day.Format(time.DateOnly), err)
	}
	rep.Version = version
	for i := 0; i < len(rows); i += rowsPerInsert {
		b, err := conn.PrepareBatch(ctx, "INSERT INTO click_reports_daily (date, version, ad_id, exact_count, billable_count, computed_at)")
		if err != nil {
			return fmt.Errorf("prepare click report rows insert: %w", err)
		}
		for _, r := range rows[i:min(i+rowsPerInsert, len(rows))] {
			if err := b.Append(day, version, r.AdID, r.ExactCount, r.BillableCount, rep.ComputedAt); err != nil {
				b.Abort()
				return fmt.Errorf("append click report row of ad %s: %w", r.AdID, err)
			}
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("insert click report rows of %s version %d: %w", day.Format(time.DateOnly), version, err)
		}
	}
	err := conn.Exec(ctx, `INSERT INTO click_report_versions
		(date, version, started_at, computed_at, source, ads, exact_count, billable_count, duplicates, fraud, records_read)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		day, version, rep.StartedAt, rep.ComputedAt, rep.Source, rep.Day.Ads, rep.Day.Exact, rep.Day.Billable,
		rep.Day.Duplicates, rep.Day.Fraud, uint64(rep.Read.Records))
	if err != nil {
		return fmt.Errorf("insert click report version %d of %s: %w", version, day.Format(time.DateOnly), err)
	}
	return nil
}

// storedRow reads an ad's row of the latest complete version of day (zero counts when the ad
// has no row in it); ok is false when the day has no complete version.
func storedRow(ctx context.Context, conn driver.Conn, day time.Time, ad string) (version uint32, row Row, ok bool, err error) {
	rows, err := conn.Query(ctx, `SELECT v.version, r.exact_count, r.billable_count
		FROM (SELECT max(version) AS version FROM click_report_versions WHERE date = ?) AS v
		LEFT JOIN (SELECT version, exact_count, billable_count FROM click_reports_daily WHERE date = ? AND ad_id = ?) AS r
		ON r.version = v.version
		WHERE v.version > 0`, day, day, ad)
	if err != nil {
		return 0, Row{}, false, fmt.Errorf("read stored click report of ad %s on %s: %w", ad, day.Format(time.DateOnly), err)
	}
	defer rows.Close()
	row.AdID = ad
	for rows.Next() {
		if err := rows.Scan(&version, &row.ExactCount, &row.BillableCount); err != nil {
			return 0, Row{}, false, fmt.Errorf("scan stored click report of ad %s: %w", ad, err)
		}
		ok = true
	}
	return version, row, ok, rows.Err()
}
