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

// ClickPoint is one bucket of a click series. Final is true where the nightly job's
// exact daily report exists and the numbers are the report's (day buckets only); otherwise the
// numbers are the streaming path's provisional ones.
type ClickPoint struct {
	T             time.Time `json:"t"`
	Count         int64     `json:"count"`
	BillableCount int64     `json:"billable_count"`
	Final         bool      `json:"final"`
}

type clickCounts struct{ count, billable int64 }

// ClickDimension is what a click series counts by: a click counts under its ad, its campaign
// and its device (click_deltas and click_group_hours carry all three; migration 021).
type ClickDimension string

// The dimensions of click series. Each is a path parameter and a column of the click tables.
const (
	ByAd       ClickDimension = "ad_id"
	ByCampaign ClickDimension = "campaign_id"
	ByDevice   ClickDimension = "device"
)

// reportDimension is the dimension's name in the nightly report's click_reports_by.
func (d ClickDimension) reportDimension() string {
	if d == ByCampaign {
		return "campaign"
	}
	return string(d)
}

// clickSeries answers GET /v1/ads/{ad_id}/clicks, /v1/campaigns/{campaign_id}/clicks and
// /v1/devices/{device}/clicks (?from=&to=&granularity=minute|hour|day) with one point per bucket,
// zero-filled like the views series.
func (h *Handler) clickSeries(dim ClickDimension) func(http.ResponseWriter, *http.Request) int {
	return func(w http.ResponseWriter, r *http.Request) int {
		value := r.PathValue(string(dim))
		if err := schemas.CheckID(string(dim), value, true); err != nil {
			return api.BadRequest(w, err)
		}
		q, err := ParseSeriesQuery(r.URL.Query(), h.now())
		if err == nil && q.Granularity == Second {
			err = &schemas.FieldError{Field: "granularity", Reason: `got "second"; want minute, hour or day`}
		}
		if err != nil {
			return api.BadRequest(w, err)
		}
		got, err := h.src.clickSeries(r.Context(), dim, value, q.Granularity, q.From, q.To)
		var reports map[int64]clickCounts
		if err == nil && q.Granularity == Day {
			reports, err = h.src.clickReports(r.Context(), dim, value, q.From, q.To)
		}
		if err != nil {
			h.logger.Warn("read click series", string(dim), value, "granularity", q.Granularity, "from", q.From, "to", q.To, "err", err)
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
		return api.JSON(w, http.StatusOK, map[string]any{string(dim): value, "granularity": q.Granularity, "from": q.From, "to": q.To, "points": points})
	}
}

// clickSeries returns the streaming path's counts of the dimension's value per bucket in
// [from, to), keyed by the bucket's start in Unix seconds. Minutes are summed from click_deltas
// (the source of truth, kept 90 days). An ad's hours are read from clicks_by_hour and its days
// from clicks_by_day; a campaign's or a device's hours and days are sums over its (ad, campaign,
// device) hours in click_group_hours (2 years), each the latest version of its group.
func (s source) clickSeries(ctx context.Context, dim ClickDimension, value string, g Granularity, from, to time.Time) (map[int64]clickCounts, error) {
	var q string
	lo, hi := any(from.UTC()), any(to.UTC())
	switch {
	case g == Minute:
		q = `SELECT toInt64(toUnixTimestamp(minute)) AS t, sum(clicks), sum(billable) FROM click_deltas
			WHERE ` + string(dim) + ` = ? AND minute >= ? AND minute < ? GROUP BY t`
	case dim == ByAd && g == Hour:
		q = `SELECT toInt64(toUnixTimestamp(hour)) AS t, toInt64(argMax(clicks, version)), toInt64(argMax(billable, version)) FROM clicks_by_hour
			WHERE ad_id = ? AND hour >= ? AND hour < ? GROUP BY t`
	case dim == ByAd:
		q = `SELECT toInt64(toUnixTimestamp(toDateTime(day))) AS t, toInt64(sum(clicks)), toInt64(sum(billable)) FROM clicks_by_day
			WHERE ad_id = ? AND day >= ? AND day < ? GROUP BY t`
		lo, hi = from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly)
	default:
		bucket := "hour"
		if g == Day {
			bucket = "toStartOfDay(hour)"
		}
		q = `SELECT toInt64(toUnixTimestamp(` + bucket + `)) AS t, sum(c), sum(b) FROM (
				SELECT hour, argMax(clicks, version) AS c, argMax(billable, version) AS b FROM click_group_hours
				WHERE ` + string(dim) + ` = ? AND hour >= ? AND hour < ? GROUP BY campaign_id, device, ad_id, hour
			) GROUP BY t`
	}
	rows, err := s.conn.Query(ctx, q, value, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("query %s click series of %s %s: %w", g, dim, value, err)
	}
	return scanClickCounts(rows)
}

// clickReports returns, for each day in [from, to) that has a complete exact report from the
// nightly job, the value's numbers in the latest complete version (zeros when it had no click
// that day), keyed by the day's start in Unix seconds. The nightly job owns the tables (its
// migration): click_report_versions lists complete versions, click_reports_final holds the ad
// rows of each date's latest one, click_reports_by its campaign and device rows. Before they
// exist there are no reports. By campaign or device, a day whose latest version has no rows of
// that dimension (written before reports had them, or a day without clicks) is not final.
func (s source) clickReports(ctx context.Context, dim ClickDimension, value string, from, to time.Time) (map[int64]clickCounts, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx, `SELECT count() FROM system.tables WHERE database = currentDatabase()
		AND name IN ('click_report_versions', 'click_reports_final', 'click_reports_by')`).Scan(&n); err != nil {
		return nil, fmt.Errorf("look for the nightly click reports: %w", err)
	}
	if n < 3 {
		return nil, nil
	}
	lo, hi := from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly)
	var rows driver.Rows
	var err error
	if dim == ByAd {
		rows, err = s.conn.Query(ctx, `SELECT t, sum(c), sum(b) FROM (
				SELECT toInt64(toUnixTimestamp(toDateTime(date))) AS t, toInt64(0) AS c, toInt64(0) AS b
				FROM click_report_versions WHERE date >= ? AND date < ? GROUP BY t
				UNION ALL
				SELECT toInt64(toUnixTimestamp(toDateTime(date))) AS t, toInt64(exact_count) AS c, toInt64(billable_count) AS b
				FROM click_reports_final WHERE ad_id = ? AND date >= ? AND date < ?
			) GROUP BY t`, lo, hi, value, lo, hi)
	} else {
		rows, err = s.conn.Query(ctx, `SELECT toInt64(toUnixTimestamp(toDateTime(r.date))) AS t,
				toInt64(sumIf(r.exact_count, r.value = ?)), toInt64(sumIf(r.billable_count, r.value = ?))
			FROM click_reports_by AS r
			INNER JOIN (SELECT date, max(version) AS version FROM click_report_versions WHERE date >= ? AND date < ? GROUP BY date) AS v
				ON r.date = v.date AND r.version = v.version
			WHERE r.dimension = ? AND r.date >= ? AND r.date < ? GROUP BY t`, value, value, lo, hi, dim.reportDimension(), lo, hi)
	}
	if err != nil {
		return nil, fmt.Errorf("query daily click reports of %s %s: %w", dim, value, err)
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
