package read

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

// clickRig starts a read handler at 2026-11-30 12:30 UTC and returns its server and a runner of
// statements on its ClickHouse.
func clickRig(t *testing.T) (*httptest.Server, func(q string, args ...any)) {
	conn, srv := newTestHandler(t, &clock{t: time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC)})
	return srv, func(q string, args ...any) {
		t.Helper()
		if err := conn.Exec(context.Background(), q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// The click series: minutes from the deltas (corrections included), hours and days from the
// rollups, zero-filled, and day points final with the nightly report's numbers where one exists
// (its latest version).
func TestClickSeries(t *testing.T) {
	srv, exec := clickRig(t)
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

// Click series by campaign and by device: sums over the (ad, campaign, device) rows of every ad
// that carries the value, each hour the newest version of its group; day points final where the
// latest complete report has rows of the dimension, with its numbers (zeros for a value without
// a row), and provisional where that version was written without them.
func TestClickSeriesByCampaignAndDevice(t *testing.T) {
	srv, exec := clickRig(t)
	exec(`INSERT INTO click_deltas (partition, epoch, clicks_end, verdicts_end, watermark, rolled_clicks, rolled_verdicts, ad_id, campaign_id, device, minute, clicks, billable) VALUES
		(0, 1, 5, 0, now64(), 0, 0, 'ad-1', 'cmp-a', 'web', '2026-11-30 12:01:00', 3, 3),
		(0, 1, 5, 0, now64(), 0, 0, 'ad-1', 'cmp-a', 'ios', '2026-11-30 12:01:00', 2, 1),
		(1, 1, 4, 0, now64(), 0, 0, 'ad-2', 'cmp-a', 'web', '2026-11-30 12:01:00', 4, 4),
		(0, 1, 5, 1, now64(), 0, 0, 'ad-1', 'cmp-a', 'web', '2026-11-30 12:01:00', 0, -1),
		(2, 1, 1, 0, now64(), 0, 0, 'ad-3', 'cmp-b', 'web', '2026-11-30 12:03:00', 1, 1),
		(0, 1, 1, 0, now64(), 0, 0, 'ad-1', '', '', '2026-11-30 12:01:00', 7, 7)`)
	exec(`INSERT INTO click_group_hours (campaign_id, device, ad_id, hour, clicks, billable, version) VALUES
		('cmp-a', 'web', 'ad-1', '2026-11-30 12:00:00', 3, 3, 1), ('cmp-a', 'web', 'ad-1', '2026-11-30 12:00:00', 3, 2, 2),
		('cmp-a', 'ios', 'ad-1', '2026-11-30 12:00:00', 2, 1, 2), ('cmp-a', 'web', 'ad-2', '2026-11-30 12:00:00', 4, 4, 1),
		('cmp-b', 'web', 'ad-3', '2026-11-30 12:00:00', 1, 1, 1), ('cmp-a', 'web', 'ad-1', '2026-11-29 08:00:00', 5, 5, 1)`)
	exec(`CREATE TABLE IF NOT EXISTS click_report_versions (date Date, version UInt32, started_at DateTime64(3, 'UTC'),
		computed_at DateTime64(3, 'UTC'), source LowCardinality(String), ads UInt64, exact_count UInt64, billable_count UInt64,
		duplicates UInt64, fraud UInt64, records_read UInt64) ENGINE = MergeTree ORDER BY (date, version)`)
	exec(`INSERT INTO click_report_versions (date, version, started_at, computed_at, source, ads, exact_count, billable_count, duplicates, fraud, records_read) VALUES
		('2026-11-28', 1, now64(), now64(), 'log', 1, 5, 5, 0, 0, 5),
		('2026-11-29', 1, now64(), now64(), 'log', 1, 6, 6, 0, 0, 6), ('2026-11-29', 2, now64(), now64(), 'log', 2, 6, 5, 0, 0, 6)`)
	exec(`INSERT INTO click_reports_by (date, version, dimension, value, exact_count, billable_count) VALUES
		('2026-11-29', 1, 'campaign', 'cmp-a', 6, 6),
		('2026-11-29', 2, 'campaign', 'cmp-a', 5, 4), ('2026-11-29', 2, 'campaign', 'cmp-b', 1, 1), ('2026-11-29', 2, 'device', 'web', 6, 5),
		('2026-11-29', 3, 'campaign', 'cmp-a', 9, 9)`)

	type point struct {
		T             time.Time `json:"t"`
		Count         int64     `json:"count"`
		BillableCount int64     `json:"billable_count"`
		Final         bool      `json:"final"`
	}
	at := func(d, h, m int) time.Time { return time.Date(2026, 11, d, h, m, 0, 0, time.UTC) }
	minutes := "granularity=minute&from=2026-11-30T12:01:00Z&to=2026-11-30T12:03:00Z"
	hours := "granularity=hour&from=2026-11-30T11:00:00Z&to=2026-11-30T12:00:00Z"
	days := "granularity=day&from=2026-11-28T00:00:00Z&to=2026-11-30T00:00:00Z"
	tests := []struct {
		name, path, query string
		want              []point
	}{
		{"campaign minutes", "/v1/campaigns/cmp-a/clicks", minutes, []point{{at(30, 12, 1), 9, 7, false}, {T: at(30, 12, 2)}, {T: at(30, 12, 3)}}},
		{"device minutes", "/v1/devices/web/clicks", minutes, []point{{at(30, 12, 1), 7, 6, false}, {T: at(30, 12, 2)}, {at(30, 12, 3), 1, 1, false}}},
		{"campaign hours", "/v1/campaigns/cmp-a/clicks", hours, []point{{T: at(30, 11, 0)}, {at(30, 12, 0), 9, 7, false}}},
		{"device hours", "/v1/devices/ios/clicks", hours, []point{{T: at(30, 11, 0)}, {at(30, 12, 0), 2, 1, false}}},
		{"campaign days", "/v1/campaigns/cmp-a/clicks", days, []point{{T: at(28, 0, 0)}, {at(29, 0, 0), 5, 4, true}, {at(30, 0, 0), 9, 7, false}}},
		{"device days", "/v1/devices/web/clicks", days, []point{{T: at(28, 0, 0)}, {at(29, 0, 0), 6, 5, true}, {at(30, 0, 0), 8, 7, false}}},
		{"campaign without a report row", "/v1/campaigns/cmp-z/clicks", days, []point{{T: at(28, 0, 0)}, {at(29, 0, 0), 0, 0, true}, {T: at(30, 0, 0)}}},
		{"the ad still sums every group", "/v1/ads/ad-1/clicks", minutes, []point{{at(30, 12, 1), 12, 10, false}, {T: at(30, 12, 2)}, {T: at(30, 12, 3)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s map[string]json.RawMessage
			code := getJSON(t, srv.URL+tt.path+"?"+tt.query, &s)
			var points []point
			if err := json.Unmarshal(s["points"], &points); err != nil {
				t.Fatalf("got %d %s: %v", code, s, err)
			}
			if code != 200 || fmt.Sprint(points) != fmt.Sprint(tt.want) {
				t.Errorf("got %d %v; want 200 %v", code, points, tt.want)
			}
		})
	}
	for path, field := range map[string]string{"/v1/campaigns/bad%20id/clicks": "campaign_id", "/v1/devices/web/clicks?granularity=second": "granularity"} {
		var s struct{ Field string }
		if code := getJSON(t, srv.URL+path, &s); code != 400 || s.Field != field {
			t.Errorf("%s: got %d naming %q; want 400 naming %q", path, code, s.Field, field)
		}
	}
}
