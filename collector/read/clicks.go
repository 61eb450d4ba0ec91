package read

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/schemas"
)

// ClickPoint is one bucket of an ad's click series. Final is true where the nightly job's
// exact daily report exists and the numbers are the report's (day buckets only); otherwise the
// numbers are the streaming path's provisional ones.
type ClickPoint struct {
	T             time.Time `json:"t"`
	Count         int64     `json:"count"`
	BillableCount int64     `json:"billable_count"`
	Final         bool      `json:"final"`
}

type clickCounts struct{ count, billable int64 }

// clickSeries answers GET /v1/ads/{ad_id}/clicks?from=&to=&granularity=minute|hour|day with one
// point per bucket, zero-filled like the views series.
func (h *Handler) clickSeries(w http.ResponseWriter, r *http.Request) int {
	ad := r.PathValue("ad_id")
	if err := schemas.CheckID("ad_id", ad, true); err != nil {
		return api.BadRequest(w, err)
	}
	q, err := ParseSeriesQuery(r.URL.Query(), h.now())
	if err == nil && q.Granularity == Second {
		err = &schemas.FieldError{Field: "granularity", Reason: `got "second"; want minute, hour or day`}
	}
	if err != nil {
		return api.BadRequest(w, err)
	}
	got, err := h.src.clickSeries(r.Context(), ad, q.Granularity, q.From, q.To)
	var reports map[int64]clickCounts
	if err == nil && q.Granularity == Day {
		reports, err = h.src.clickReports(r.Context(), ad, q.From, q.To)
	}
	if err != nil {
		h.logger.Warn("read click series", "ad_id", ad, "granularity", q.Granularity, "from", q.From, "to", q.To, "err", err)
		return api.Unavailable(w, "click series are unavailable right now; retry later")
	}
	points := make([]ClickPoint, 0, q.Points())
	step := q.Granularity.Step()
	for t := q.From; t.Before(q.To); t = t.Add(step) {
		c, final := got[t.Unix()], false
		if rep, ok := reports[t.Unix()]; ok {
			c, final = rep, true
		}
		points = append(points, ClickPoint{T: t, Count: max(c.count, 0), BillableCount: max(c.billable, 0), Final: final})
	}
	return api.JSON(w, http.StatusOK, struct {
		AdID        string       `json:"ad_id"`
		Granularity Granularity  `json:"granularity"`
		From        time.Time    `json:"from"`
		To          time.Time    `json:"to"`
		Points      []ClickPoint `json:"points"`
	}{ad, q.Granularity, q.From, q.To, points})
}

// clickSeries returns the streaming path's counts of ad per bucket in [from, to), keyed by the
// bucket's start in Unix seconds: minutes are summed from click_deltas (the source of truth,
// kept 90 days), hours read from clicks_by_hour and days from clicks_by_day (2 years).
func (s source) clickSeries(ctx context.Context, ad string, g Granularity, from, to time.Time) (map[int64]clickCounts, error) {
	var q string
	lo, hi := any(from.UTC()), any(to.UTC())
	switch g {
	case Minute:
		q = `SELECT toInt64(toUnixTimestamp(minute)) AS t, sum(clicks), sum(billable) FROM click_deltas
			WHERE ad_id = ? AND minute >= ? AND minute < ? GROUP BY t`
	case Hour:
		q = `SELECT toInt64(toUnixTimestamp(hour)) AS t, toInt64(argMax(clicks, version)), toInt64(argMax(billable, version)) FROM clicks_by_hour
			WHERE ad_id = ? AND hour >= ? AND hour < ? GROUP BY t`
	default:
		q = `SELECT toInt64(toUnixTimestamp(toDateTime(day))) AS t, toInt64(sum(clicks)), toInt64(sum(billable)) FROM clicks_by_day
			WHERE ad_id = ? AND day >= ? AND day < ? GROUP BY t`
		lo, hi = from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly)
	}
	rows, err := s.conn.Query(ctx, q, ad, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("query %s click series of %s: %w", g, ad, err)
	}
	return scanClickCounts(rows)
}

// clickReports returns, for each day in [from, to) that has a complete exact report from the
// nightly job, ad's numbers in the latest complete version (zeros when the ad had no click that
// day), keyed by the day's start in Unix seconds. The nightly job owns the tables (its
// migration): click_report_versions lists complete versions, click_reports_final holds the rows
// of each date's latest one. Before they exist there are no reports.
func (s source) clickReports(ctx context.Context, ad string, from, to time.Time) (map[int64]clickCounts, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx, `SELECT count() FROM system.tables WHERE database = currentDatabase()
		AND name IN ('click_report_versions', 'click_reports_final')`).Scan(&n); err != nil {
		return nil, fmt.Errorf("look for the nightly click reports: %w", err)
	}
	if n < 2 {
		return nil, nil
	}
	lo, hi := from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly)
	rows, err := s.conn.Query(ctx, `SELECT t, sum(c), sum(b) FROM (
			SELECT toInt64(toUnixTimestamp(toDateTime(date))) AS t, toInt64(0) AS c, toInt64(0) AS b
			FROM click_report_versions WHERE date >= ? AND date < ? GROUP BY t
			UNION ALL
			SELECT toInt64(toUnixTimestamp(toDateTime(date))) AS t, toInt64(exact_count) AS c, toInt64(billable_count) AS b
			FROM click_reports_final WHERE ad_id = ? AND date >= ? AND date < ?
		) GROUP BY t`, lo, hi, ad, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("query daily click reports of %s: %w", ad, err)
	}
	return scanClickCounts(rows)
}

func scanClickCounts(rows driver.Rows) (map[int64]clickCounts, error) {
	defer rows.Close()
	out := map[int64]clickCounts{}
	for rows.Next() {
		var t int64
		var c clickCounts
		if err := rows.Scan(&t, &c.count, &c.billable); err != nil {
			return nil, fmt.Errorf("scan click series: %w", err)
		}
		out[t] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read click series: %w", err)
	}
	return out, nil
}
