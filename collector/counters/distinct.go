package counters

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/collector/read"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/schemas"
)

// maxBestEffortHours bounds a best_effort distinct count's range: one Redis key per hour, merged
// by one PFCOUNT.
const maxBestEffortHours = 31 * 24

// StdErrorEventualDistinct is the relative standard error stated for the eventual mode's
// distinct counts (ClickHouse's uniqCombined64 at its default precision; TestDistinctCounts
// measures it).
const StdErrorEventualDistinct = 0.01

// Distinct is the body of add-distinct.
type Distinct struct {
	Member    string `json:"member"`
	EventTime string `json:"event_time"`
}

// DistinctCount is the answer of a distinct count.
type DistinctCount struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Distinct  int64     `json:"distinct"`
	// StdError is the estimate's relative standard error.
	StdError float64 `json:"std_error"`
}

// addDistinct adds a member to the counter's distinct members of the hour of its event time:
// best_effort in Redis (200), eventual through the log (202).
func (h *Handler) addDistinct(w http.ResponseWriter, r *http.Request) int {
	ns, name, code := h.counter(w, r)
	if code != 0 {
		return code
	}
	var d Distinct
	if err := decode(w, r, &d); err != nil {
		return api.BadRequest(w, err)
	}
	if err := schemas.CheckID("member", d.Member, true); err != nil {
		return api.BadRequest(w, err)
	}
	at := h.o.Now()
	if d.EventTime != "" {
		t, err := time.Parse(time.RFC3339Nano, d.EventTime)
		if err != nil {
			return api.BadRequest(w, &schemas.FieldError{Field: "event_time", Reason: fmt.Sprintf("got %q; want an RFC 3339 time", d.EventTime)})
		}
		at = t
	}
	if ns.Mode.Logged() {
		if err := h.eventual.writeMember(r.Context(), ns, name, d.Member, at); err != nil {
			return h.failed(w, "add distinct member", err)
		}
		return api.JSON(w, http.StatusAccepted, Result{})
	}
	if err := h.o.BestEffort.AddDistinct(r.Context(), ns, name, d.Member, at); err != nil {
		return h.failed(w, "add distinct member", err)
	}
	return api.JSON(w, http.StatusOK, Result{})
}

// distinct estimates how many distinct members were added to the counter in whole hours from
// from to to (the series' parameters at hour granularity; the last 24 hours by default).
func (h *Handler) distinct(w http.ResponseWriter, r *http.Request) int {
	ns, code := h.namespace(w, r, counters.Namespace.MayRead)
	if code != 0 {
		return code
	}
	name := r.PathValue("name")
	if err := counters.CheckCounter(name); err != nil {
		return api.BadRequest(w, err)
	}
	v := r.URL.Query()
	if v.Has("granularity") {
		return api.Error(w, http.StatusBadRequest, "granularity", "a distinct count is one number over whole hours; give from and to")
	}
	now := h.o.Now()
	if !v.Has("from") {
		to := now
		if v.Has("to") {
			ms, err := schemas.ParseTS(v.Get("to"))
			if err != nil {
				return api.BadRequest(w, &schemas.FieldError{Field: "to", Reason: err.Error()})
			}
			to = time.UnixMilli(ms)
		}
		v.Set("from", strconv.FormatInt(to.Add(-23*time.Hour).UnixMilli(), 10))
	}
	v.Set("granularity", string(read.Hour))
	q, err := read.ParseSeriesQuery(v, now)
	if err != nil {
		return api.BadRequest(w, err)
	}
	out := DistinctCount{Namespace: ns.Name, Name: name, From: q.From, To: q.To}
	if ns.Mode.Logged() {
		out.StdError = StdErrorEventualDistinct
		out.Distinct, err = h.eventual.distinct(r.Context(), ns, name, q.From, q.To)
	} else {
		if q.Points() > maxBestEffortHours {
			return api.Error(w, http.StatusBadRequest, "from", fmt.Sprintf("range has %d hours; a best_effort namespace counts at most %d", q.Points(), maxBestEffortHours))
		}
		out.StdError = counters.StdErrorBestEffortDistinct
		out.Distinct, err = h.o.BestEffort.Distinct(r.Context(), ns, name, q.From, q.To)
	}
	if err != nil {
		return h.failed(w, "count distinct members", err)
	}
	return api.JSON(w, http.StatusOK, out)
}

// writeMember writes one distinct member to the log.
func (e *eventual) writeMember(ctx context.Context, ns counters.Namespace, name, member string, at time.Time) error {
	ev := counterEvent(ns, name, schemas.CounterDistinct, 0, "", at)
	ev.Member = member
	return e.produce(ctx, record(ns, name, ev))
}

// distinct merges the counter's hourly sketches in [from, to).
func (e *eventual) distinct(ctx context.Context, ns counters.Namespace, name string, from, to time.Time) (int64, error) {
	if err := e.slot(ctx); err != nil {
		return 0, err
	}
	defer func() { <-e.reads }()
	var n uint64
	if err := e.conn.QueryRow(ctx, `SELECT uniqCombined64Merge(members) FROM counter_distinct
		WHERE ns = ? AND generation = ? AND name = ? AND hour >= ? AND hour < ?`, ns.Name, ns.Generation, name, from.UTC(), to.UTC()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count distinct members of %s/%s: %w", ns.Name, name, err)
	}
	return int64(n), nil
}
