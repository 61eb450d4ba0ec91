package counters

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
)

// rowsPerInsert bounds one INSERT of report rows; namesPerQuery one IN list of counter names.
const (
	rowsPerInsert = 100_000
	namesPerQuery = 10_000
)

// storedTotals reads, from counter_deltas, the stream's totals before day and at its end of the
// counters of ns (generation gen) that have rows in the day's minutes or are among names.
func storedTotals(ctx context.Context, conn driver.Conn, ns string, gen uint64, day time.Time, names []string) (map[string]Stored, error) {
	end := day.AddDate(0, 0, 1)
	out := map[string]Stored{}
	read := func(cond string, args ...any) error {
		rows, err := conn.Query(ctx, `SELECT name, sumIf(delta, minute < ?), sum(delta), countIf(minute >= ?) > 0 FROM counter_deltas
			WHERE ns = ? AND generation = ? AND minute < ? AND `+cond+` GROUP BY name`, append([]any{day, day, ns, gen, end}, args...)...)
		if err != nil {
			return fmt.Errorf("read stored totals of %s on %s: %w", ns, day.Format(time.DateOnly), err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var s Stored
			if err := rows.Scan(&name, &s.Before, &s.End, &s.ChangedOnDay); err != nil {
				return fmt.Errorf("scan stored total of %s: %w", ns, err)
			}
			out[name] = s
		}
		return rows.Err()
	}
	if err := read(`name IN (SELECT DISTINCT name FROM counter_deltas WHERE ns = ? AND generation = ? AND minute >= ? AND minute < ?)`, ns, gen, day, end); err != nil {
		return nil, err
	}
	for i := 0; i < len(names); i += namesPerQuery {
		if err := read(`name IN (?)`, names[i:min(i+namesPerQuery, len(names))]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// writeVersion stores the rows of rep's namespace and day as a new version and sets its number:
// one above every version of the pair in either table, so rows of a run that died before its
// version row are never adopted. Rows go first and the version row last, in its own INSERT:
// readers find a version through its version row, so they see all of it or none. Nothing is
// ever updated or deleted: a rerun adds a version beside the earlier ones.
func writeVersion(ctx context.Context, conn driver.Conn, rep *Report, rows []Row) error {
	day, ns := rep.Date, rep.Namespace
	var version uint32
	if err := conn.QueryRow(ctx, `SELECT toUInt32(greatest(
		(SELECT max(version) FROM counter_report_versions WHERE ns = ? AND date = ?),
		(SELECT max(version) FROM counter_reports_daily WHERE ns = ? AND date = ?)) + 1)`, ns, day, ns, day).Scan(&version); err != nil {
		return fmt.Errorf("read last counter report version of %s on %s: %w", ns, day.Format(time.DateOnly), err)
	}
	rep.Version = version
	err := chclient.InsertBlocks(ctx, conn, `INSERT INTO counter_reports_daily
		(ns, generation, date, version, name, adds, clears, duplicates, end_count, before, stored, computed_at)`, rowsPerInsert, rows,
		func(r Row) []any {
			return []any{ns, rep.Generation, day, version, r.Name, r.Adds, r.Clears, r.Duplicates, r.Count, r.Before, r.Stored, rep.ComputedAt}
		})
	if err != nil {
		return fmt.Errorf("write counter report rows of %s on %s version %d: %w", ns, day.Format(time.DateOnly), version, err)
	}
	err = conn.Exec(ctx, `INSERT INTO counter_report_versions
		(ns, generation, date, version, started_at, computed_at, counters, differing, adds, clears, duplicates, records_read, undecodable)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ns, rep.Generation, day, version, rep.StartedAt, rep.ComputedAt, uint64(rep.Counters), uint64(len(rep.Differing)),
		rep.Adds, rep.Clears, rep.Duplicates, uint64(rep.Read.Records), uint64(rep.Read.Undecodable))
	if err != nil {
		return fmt.Errorf("insert counter report version %d of %s on %s: %w", version, ns, day.Format(time.DateOnly), err)
	}
	return nil
}
