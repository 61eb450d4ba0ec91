// Package reports serves the nightly job's exact daily click counts to billing:
// GET /v1/reports/daily/{date} answers one version of a date's report (the latest, or the one
// asked for) with every ad's exact and billable count, or with ?by=campaign|device every
// campaign's or device's, a page at a time.
//
// A version is visible once its row in click_report_versions exists; the job writes that row
// after all of the version's rows, so an answer is never part of a version. Versions never
// change, so a page of a pinned version is the same whenever it is read.
//
// Reads are ClickHouse queries (billing reads a few times a day, not per feed page), at most
// MaxInFlight at once so they cannot crowd the pipeline's writes out of an embedded engine. A
// Handler is safe for concurrent use and owns no goroutines.
package reports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/schemas"
)

// Page sizes: the default, and the most one request may ask for.
const (
	DefaultLimit = 10_000
	MaxLimit     = 100_000
)

// Options configure a Handler. ClickHouse and Logger are required.
type Options struct {
	ClickHouse driver.Conn
	Logger     *slog.Logger
	// MaxInFlight bounds the report queries running at once; 0 means 2.
	MaxInFlight int
	// Wait is how long a request waits for a free slot before answering 503; 0 means 5s.
	Wait time.Duration
}

// Handler serves the report route.
type Handler struct {
	conn   driver.Conn
	logger *slog.Logger
	slots  chan struct{}
	wait   time.Duration
}

// New returns a handler as o says.
func New(o Options) *Handler {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 2
	}
	if o.Wait <= 0 {
		o.Wait = 5 * time.Second
	}
	return &Handler{conn: o.ClickHouse, logger: o.Logger, slots: make(chan struct{}, o.MaxInFlight), wait: o.Wait}
}

// Register adds the report route to r.
func (h *Handler) Register(r *api.Router) {
	r.Handle("GET /v1/reports/daily/{date}", "daily_report", h.daily)
}

// AdCount is one ad's numbers in a report.
type AdCount struct {
	AdID          string `json:"ad_id"`
	ExactCount    uint64 `json:"exact_count"`
	BillableCount uint64 `json:"billable_count"`
}

// Totals sums a version over all its ads.
type Totals struct {
	Ads           uint64 `json:"ads"`
	ExactCount    uint64 `json:"exact_count"`
	BillableCount uint64 `json:"billable_count"`
}

// GroupCount is one campaign's or one device's numbers in a report: the clicks whose first
// occurrence carried it.
type GroupCount struct {
	Value         string `json:"value"`
	ExactCount    uint64 `json:"exact_count"`
	BillableCount uint64 `json:"billable_count"`
}

// Daily is the answer: one page of one version of a date's report, by ad (Ads) or by campaign or
// device (Groups).
type Daily struct {
	Date          string       `json:"date"`
	Version       uint32       `json:"version"`
	LatestVersion uint32       `json:"latest_version"`
	Final         bool         `json:"final"` // always true: reports are the exact numbers
	ComputedAt    time.Time    `json:"computed_at"`
	Totals        Totals       `json:"totals"`
	By            string       `json:"by"`
	Ads           []AdCount    `json:"ads,omitzero"` // by ad: always a list, even empty
	Groups        []GroupCount `json:"groups,omitzero"`
	// NextAfter, when set, is the after= of the next page (ask with version= to stay on
	// this version).
	NextAfter string `json:"next_after,omitempty"`
}

// The groupings a report is read by: its rows per ad, or click_reports_by's dimensions.
const (
	ByAd       = "ad"
	ByCampaign = "campaign"
	ByDevice   = "device"
)

type query struct {
	date    time.Time
	version uint32 // 0: latest
	by      string
	after   string
	limit   int
}

func parse(r *http.Request) (query, error) {
	var q query
	d, err := time.Parse(time.DateOnly, r.PathValue("date"))
	if err != nil {
		return q, &schemas.FieldError{Field: "date", Reason: fmt.Sprintf("is %q; want a UTC date YYYY-MM-DD", r.PathValue("date"))}
	}
	q.date = d
	p := r.URL.Query()
	switch q.by = p.Get("by"); q.by {
	case "":
		q.by = ByAd
	case ByAd, ByCampaign, ByDevice:
	default:
		return q, &schemas.FieldError{Field: "by", Reason: fmt.Sprintf("is %q; want ad, campaign or device", q.by)}
	}
	if v := p.Get("version"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return q, &schemas.FieldError{Field: "version", Reason: fmt.Sprintf("is %q; want a version number from 1", v)}
		}
		q.version = uint32(n)
	}
	if a := p.Get("after"); a != "" {
		if err := schemas.CheckID("after", a, false); err != nil {
			return q, err
		}
		q.after = a
	}
	q.limit = DefaultLimit
	if l := p.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxLimit {
			return q, &schemas.FieldError{Field: "limit", Reason: fmt.Sprintf("is %q; want 1..%d", l, MaxLimit)}
		}
		q.limit = n
	}
	return q, nil
}

// errNotFound is a date or version without a complete report.
type errNotFound string

func (e errNotFound) Error() string { return string(e) }

func (h *Handler) daily(w http.ResponseWriter, r *http.Request) int {
	q, err := parse(r)
	if err != nil {
		return api.BadRequest(w, err)
	}
	wctx, cancel := context.WithTimeout(r.Context(), h.wait)
	select {
	case h.slots <- struct{}{}:
		cancel()
	case <-wctx.Done():
		cancel()
		return api.Unavailable(w, "too many report reads at once; retry shortly")
	}
	defer func() { <-h.slots }()
	out, err := h.read(r.Context(), q)
	var nf errNotFound
	switch {
	case errors.As(err, &nf):
		return api.Error(w, http.StatusNotFound, "", nf.Error())
	case err != nil:
		h.logger.Warn("read daily click report", "date", q.date.Format(time.DateOnly), "err", err)
		return api.Unavailable(w, "reports are unavailable right now; retry later")
	}
	return api.JSON(w, http.StatusOK, out)
}

// read answers q: the version's row first (which makes it visible), then a page of its rows.
func (h *Handler) read(ctx context.Context, q query) (Daily, error) {
	out, err := h.version(ctx, q)
	if err != nil {
		return out, err
	}
	if q.by == ByAd {
		err = h.page(ctx, &out, q, `SELECT ad_id, exact_count, billable_count FROM click_reports_daily
			WHERE date = ? AND version = ? AND ad_id > ? ORDER BY ad_id LIMIT ?`, q.date, out.Version, q.after, q.limit+1)
	} else {
		err = h.page(ctx, &out, q, `SELECT value, exact_count, billable_count FROM click_reports_by
			WHERE date = ? AND version = ? AND dimension = ? AND value > ? ORDER BY value LIMIT ?`, q.date, out.Version, q.by, q.after, q.limit+1)
		if err == nil && q.after == "" && len(out.Groups) == 0 && out.Totals.ExactCount > 0 {
			return out, errNotFound(fmt.Sprintf("version %d of the daily click report for %s has no breakdown by %s (written before reports had one); run batchjob clicks --date %s again",
				out.Version, out.Date, q.by, out.Date))
		}
	}
	return out, err
}

// version reads the date's versions and keeps the one q asks for.
func (h *Handler) version(ctx context.Context, q query) (Daily, error) {
	date := q.date.Format(time.DateOnly)
	out := Daily{Date: date, Final: true, By: q.by}
	rows, err := h.conn.Query(ctx, `SELECT version, computed_at, ads, exact_count, billable_count,
		max(version) OVER () AS latest
		FROM click_report_versions WHERE date = ? ORDER BY version`, q.date)
	if err != nil {
		return out, fmt.Errorf("read versions of %s: %w", date, err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var d Daily
		if err := rows.Scan(&d.Version, &d.ComputedAt, &d.Totals.Ads, &d.Totals.ExactCount, &d.Totals.BillableCount, &out.LatestVersion); err != nil {
			return out, fmt.Errorf("scan versions of %s: %w", date, err)
		}
		if q.version == 0 || d.Version == q.version {
			out.Version, out.ComputedAt, out.Totals = d.Version, d.ComputedAt.UTC(), d.Totals
			found = true
		}
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("read versions of %s: %w", date, err)
	}
	switch {
	case out.LatestVersion == 0:
		return out, errNotFound(fmt.Sprintf("no daily click report for %s yet (the nightly job writes it after the day)", date))
	case !found:
		return out, errNotFound(fmt.Sprintf("no version %d of the daily click report for %s; the latest is %d", q.version, date, out.LatestVersion))
	}
	return out, nil
}

// page reads a page of rows (a key, its exact and billable count) with the statement sql, which
// asks for one row more than q.limit to learn whether another page follows.
func (h *Handler) page(ctx context.Context, out *Daily, q query, sql string, args ...any) error {
	rows, err := h.conn.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("read rows of %s version %d by %s: %w", out.Date, out.Version, q.by, err)
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var g GroupCount
		if err := rows.Scan(&g.Value, &g.ExactCount, &g.BillableCount); err != nil {
			return fmt.Errorf("scan rows of %s version %d by %s: %w", out.Date, out.Version, q.by, err)
		}
		keys = append(keys, g.Value)
		if q.by == ByAd {
			out.Ads = append(out.Ads, AdCount{AdID: g.Value, ExactCount: g.ExactCount, BillableCount: g.BillableCount})
		} else {
			out.Groups = append(out.Groups, g)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read rows of %s version %d by %s: %w", out.Date, out.Version, q.by, err)
	}
	if len(keys) > q.limit {
		out.Ads, out.Groups = trim(out.Ads, q.limit), trim(out.Groups, q.limit)
		out.NextAfter = keys[q.limit-1]
	}
	if q.by == ByAd && out.Ads == nil {
		out.Ads = []AdCount{} // a day by ad always lists its ads, even none
	}
	return nil
}

// trim cuts s to n elements (nil stays nil).
func trim[T any](s []T, n int) []T { return s[:min(n, len(s))] }
