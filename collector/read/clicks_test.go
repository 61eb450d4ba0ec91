package read

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The click series: minutes from the deltas (corrections included), hours and days from the
// rollups, zero-filled, and day points final with the nightly report's numbers where one exists
// (its latest version).
func TestClickSeries(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC)}
	conn, srv := newTestHandler(t, c)
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Two batches in minute 12:01 (the second a fraud correction), one in 12:03.
	exec(`INSERT INTO click_deltas (partition, epoch, clicks_end, verdicts_end, watermark, rolled_clicks, rolled_verdicts, ad_id, minute, clicks, billable) VALUES
		(0, 1, 5, 0, now64(), 0, 0, 'ad-1', '2026-11-30 12:01:00', 5, 5),
		(0, 1, 5, 1, now64(), 0, 0, 'ad-1', '2026-11-30 12:01:00', 0, -1),
		(0, 1, 7, 1, now64(), 0, 0, 'ad-1', '2026-11-30 12:03:00', 2, 2),
		(0, 1, 7, 1, now64(), 0, 0, 'ad-2', '2026-11-30 12:03:00', 9, 9)`)
	exec(`INSERT INTO clicks_by_hour (ad_id, hour, clicks, billable, version) VALUES
		('ad-1', '2026-11-30 12:00:00', 5, 5, 1), ('ad-1', '2026-11-30 12:00:00', 7, 6, 2), ('ad-1', '2026-11-29 08:00:00', 3, 3, 1)`)

	type point struct {
		T             time.Time `json:"t"`
		Count         int64     `json:"count"`
		BillableCount int64     `json:"billable_count"`
		Final         bool      `json:"final"`
	}
	type series struct {
		Points []point `json:"points"`
		Error  string  `json:"error"`
		Field  string  `json:"field"`
	}
	get := func(q string) (int, series) {
		t.Helper()
		var s series
		code := getJSON(t, srv.URL+"/v1/ads/ad-1/clicks?"+q, &s)
		return code, s
	}
	code, s := get("granularity=minute&from=2026-11-30T12:00:00Z&to=2026-11-30T12:04:00Z")
	want := []point{{T: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}, {time.Date(2026, 11, 30, 12, 1, 0, 0, time.UTC), 5, 4, false},
		{T: time.Date(2026, 11, 30, 12, 2, 0, 0, time.UTC)}, {time.Date(2026, 11, 30, 12, 3, 0, 0, time.UTC), 2, 2, false}, {T: time.Date(2026, 11, 30, 12, 4, 0, 0, time.UTC)}}
	if code != 200 || fmt.Sprint(s.Points) != fmt.Sprint(want) {
		t.Errorf("minutes: got %d %v; want 200 %v", code, s.Points, want)
	}
	code, s = get("granularity=hour&from=2026-11-30T11:00:00Z&to=2026-11-30T12:00:00Z")
	want = []point{{T: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)}, {time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), 7, 6, false}}
	if code != 200 || fmt.Sprint(s.Points) != fmt.Sprint(want) {
		t.Errorf("hours: got %d %v; want 200 %v (the newest version of an hour)", code, s.Points, want)
	}
	day := func(d int) time.Time { return time.Date(2026, 11, d, 0, 0, 0, 0, time.UTC) }
	code, s = get("granularity=day&from=2026-11-29T00:00:00Z&to=2026-11-30T00:00:00Z")
	want = []point{{day(29), 3, 3, false}, {day(30), 7, 6, false}}
	if code != 200 || fmt.Sprint(s.Points) != fmt.Sprint(want) {
		t.Errorf("days without reports: got %d %v; want 200 %v", code, s.Points, want)
	}

	// The nightly job's tables (its migration, another component's: the same DDL): where a day
	// has a complete report, the day point is final with the latest complete version's numbers,
	// zeros for an ad without a row; rows of a version without its versions row are not read.
	exec(`CREATE TABLE IF NOT EXISTS click_reports_daily (date Date, version UInt32, ad_id String, exact_count UInt64,
		billable_count UInt64, computed_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY (date, version, ad_id)`)
	exec(`CREATE TABLE IF NOT EXISTS click_report_versions (date Date, version UInt32, started_at DateTime64(3, 'UTC'),
		computed_at DateTime64(3, 'UTC'), source LowCardinality(String), ads UInt64, exact_count UInt64, billable_count UInt64,
		duplicates UInt64, fraud UInt64, records_read UInt64) ENGINE = MergeTree ORDER BY (date, version)`)
	exec(`CREATE VIEW IF NOT EXISTS click_reports_final AS
		SELECT r.date AS date, r.version AS version, r.ad_id AS ad_id, r.exact_count AS exact_count,
		       r.billable_count AS billable_count, r.computed_at AS computed_at
		FROM click_reports_daily AS r
		INNER JOIN (SELECT date, max(version) AS version FROM click_report_versions GROUP BY date) AS v
		    ON r.date = v.date AND r.version = v.version`)
	exec(`INSERT INTO click_reports_daily (date, version, ad_id, exact_count, billable_count, computed_at) VALUES
		('2026-11-28', 1, 'ad-2', 5, 5, now64()),
		('2026-11-29', 1, 'ad-1', 4, 2, now64()), ('2026-11-29', 2, 'ad-1', 4, 1, now64()), ('2026-11-29', 3, 'ad-1', 9, 9, now64())`)
	exec(`INSERT INTO click_report_versions (date, version, started_at, computed_at, source, ads, exact_count, billable_count, duplicates, fraud, records_read) VALUES
		('2026-11-28', 1, now64(), now64(), 'log', 1, 5, 5, 0, 0, 5),
		('2026-11-29', 1, now64(), now64(), 'log', 1, 4, 2, 0, 0, 4), ('2026-11-29', 2, now64(), now64(), 'log', 1, 4, 1, 0, 0, 4)`)
	code, s = get("granularity=day&from=2026-11-28T00:00:00Z&to=2026-11-30T00:00:00Z")
	want = []point{{day(28), 0, 0, true}, {day(29), 4, 1, true}, {day(30), 7, 6, false}}
	if code != 200 || fmt.Sprint(s.Points) != fmt.Sprint(want) {
		t.Errorf("days with reports: got %d %v; want 200 %v (version 3 is incomplete)", code, s.Points, want)
	}

	for _, q := range []string{"granularity=second", "granularity=week", "from=yesterday"} {
		if code, s := get(q); code != 400 || s.Field == "" {
			t.Errorf("%s: got %d %+v; want 400 naming the field", q, code, s)
		}
	}
}
