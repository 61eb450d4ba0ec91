package clicks

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
)

// rowsPerInsert bounds one INSERT of report rows, so a day of a million ads is a few blocks.
const rowsPerInsert = 100_000

// writeVersion stores a day's rows and their breakdown by campaign and device as a new version
// of the date and sets its number: one above every version of the date in any of the tables, so
// rows of a run that died before its version row are never adopted. Rows go first and the
// version row last, in its own INSERT: readers find a version through its version row, so they
// see all of it or none. Nothing is ever updated or deleted: a rerun adds a version beside the
// earlier ones.
func writeVersion(ctx context.Context, conn driver.Conn, rep *Report, rows []Row, by Breakdown) error {
	day := rep.Date
	var version uint32
	if err := conn.QueryRow(ctx, `SELECT toUInt32(greatest(
		(SELECT max(version) FROM click_report_versions WHERE date = ?),
		(SELECT max(version) FROM click_reports_daily WHERE date = ?),
		(SELECT max(version) FROM click_reports_by WHERE date = ?)) + 1)`, day, day, day).Scan(&version); err != nil {
		return fmt.Errorf("read last click report version of %s: %w", day.Format(time.DateOnly), err)
	}
	rep.Version = version
	err := chclient.InsertBlocks(ctx, conn, "INSERT INTO click_reports_daily (date, version, ad_id, exact_count, billable_count, computed_at)", rowsPerInsert, rows,
		func(r Row) []any { return []any{day, version, r.AdID, r.ExactCount, r.BillableCount, rep.ComputedAt} })
	for _, g := range []struct {
		dimension string
		groups    []Group
	}{{"campaign", by.Campaigns}, {"device", by.Devices}} {
		if err != nil {
			break
		}
		err = chclient.InsertBlocks(ctx, conn, "INSERT INTO click_reports_by (date, version, dimension, value, exact_count, billable_count)", rowsPerInsert, g.groups,
			func(r Group) []any { return []any{day, version, g.dimension, r.Value, r.ExactCount, r.BillableCount} })
	}
	if err != nil {
		return fmt.Errorf("write click report rows of %s version %d: %w", day.Format(time.DateOnly), version, err)
	}
	err = conn.Exec(ctx, `INSERT INTO click_report_versions
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

// Rejected is a click or fraud-verdict record the streaming clicks aggregator refused (it does
// not decode or validate) and set aside in dead_letters: counted nowhere, by the stream or by
// this job, whose reader refuses the same records.
type Rejected struct {
	Source    string // topic: clicks or fraud_verdicts
	Partition int32
	Offset    int64
	Key       string // the record's key (the collector keys both topics by ad)
	AdID      string // the ad its payload names; "" when the payload does not say (schemas.RecordAdID)
	Reason    string
	Bytes     int // of the payload kept (at most 64 KiB)
	SeenAt    time.Time
}

// adPrefix is how much of a payload is read to find its ad: the wire header, the time and the
// click id and ad id, each a uvarint length and at most 4*MaxIDLen bytes (the decoder's bound).
const adPrefix = 2 + 8 + 2*(binary.MaxVarintLen64+4*schemas.MaxIDLen)

// rejectedOn reads the click and verdict records set aside on day, by seen_at: the time the
// aggregator first set the record aside, which a replay keeps (aggregator/deadletter). It
// returns those whose payload names ad or names no ad, in (source, partition, offset) order, and
// how many others name another ad.
func rejectedOn(ctx context.Context, conn driver.Conn, day time.Time, ad string) (listed []Rejected, others int, err error) {
	rows, err := conn.Query(ctx, `SELECT source, partition, offset, ref, reason, substring(payload, 1, ?), length(payload), seen_at
		FROM dead_letters FINAL WHERE source IN (?, ?) AND seen_at >= ? AND seen_at < ?
		ORDER BY source, partition, offset`,
		adPrefix, schemas.TopicClicks, schemas.TopicFraudVerdicts, day, day.AddDate(0, 0, 1))
	if err != nil {
		return nil, 0, fmt.Errorf("read rejected click records of %s: %w", day.Format(time.DateOnly), err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Rejected
		var prefix string
		var n uint64
		if err := rows.Scan(&r.Source, &r.Partition, &r.Offset, &r.Key, &r.Reason, &prefix, &n, &r.SeenAt); err != nil {
			return nil, 0, fmt.Errorf("scan rejected click record: %w", err)
		}
		r.Bytes = int(n)
		if a, ok := schemas.RecordAdID([]byte(prefix)); ok {
			if a != ad {
				others++
				continue
			}
			r.AdID = a
		}
		listed = append(listed, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read rejected click records of %s: %w", day.Format(time.DateOnly), err)
	}
	return listed, others, nil
}
