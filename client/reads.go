package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Ready asks the collector whether it serves (GET /readyz, no key needed); an *APIError with
// status 503 says it does not yet, or no longer.
func (c *Client) Ready(ctx context.Context) error {
	return c.call(ctx, request{method: http.MethodGet, path: "/readyz", want: http.StatusOK})
}

// Counts is an item's totals: views, the unique-viewer estimate and exact likes.
type Counts struct {
	ItemID        string `json:"item_id"`
	Views         int64  `json:"views"`
	UniqueViewers int64  `json:"unique_viewers"`
	Likes         int64  `json:"likes"`
}

// MaxCountIDs is the most ids one Counts call may ask for.
const MaxCountIDs = 100

// Counts reads the totals of up to MaxCountIDs items in one call (GET /v1/counts), in the
// order asked. Unknown items are zeros.
func (c *Client) Counts(ctx context.Context, ids ...string) ([]Counts, error) {
	if len(ids) == 0 || len(ids) > MaxCountIDs {
		return nil, fmt.Errorf("counts: got %d ids; want 1..%d", len(ids), MaxCountIDs)
	}
	var out struct {
		Items []Counts `json:"items"`
	}
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/counts",
		query: url.Values{"ids": {strings.Join(ids, ",")}}, want: http.StatusOK, out: &out})
	return out.Items, err
}

// ItemCounts reads one item's totals (GET /v1/items/{id}/counts).
func (c *Client) ItemCounts(ctx context.Context, itemID string) (Counts, error) {
	var out Counts
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/items/" + url.PathEscape(itemID) + "/counts",
		want: http.StatusOK, out: &out})
	return out, err
}

// Granularity is a series' bucket width.
type Granularity string

const (
	Second Granularity = "second"
	Minute Granularity = "minute"
	Hour   Granularity = "hour"
	Day    Granularity = "day"
)

// SeriesQuery selects a range; zero times and granularity take the server's defaults (the last
// 60 minutes).
type SeriesQuery struct {
	From, To    time.Time
	Granularity Granularity
}

func (q SeriesQuery) values() url.Values {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", strconv.FormatInt(q.From.UnixMilli(), 10))
	}
	if !q.To.IsZero() {
		v.Set("to", strconv.FormatInt(q.To.UnixMilli(), 10))
	}
	if q.Granularity != "" {
		v.Set("granularity", string(q.Granularity))
	}
	return v
}

// Series is a zero-filled series of views by event time. At Minute, Hour and Day granularity it
// carries the unique viewers of each bucket and of the whole range (HyperLogLog estimates, about
// 0.8% standard error); nil at Second granularity, whose buckets have no sketches of their own.
type Series struct {
	ItemID        string      `json:"item_id"`
	Granularity   Granularity `json:"granularity"`
	From          time.Time   `json:"from"`
	To            time.Time   `json:"to"`
	Points        []Point     `json:"points"`
	UniqueViewers *int64      `json:"unique_viewers,omitempty"`
}

// Point is one bucket of a series.
type Point struct {
	T             time.Time `json:"t"`
	Views         int64     `json:"views"`
	UniqueViewers *int64    `json:"unique_viewers,omitempty"` // at Minute, Hour and Day granularity
}

// Views reads an item's views series (GET /v1/items/{id}/views).
func (c *Client) Views(ctx context.Context, itemID string, q SeriesQuery) (Series, error) {
	var out Series
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/items/" + url.PathEscape(itemID) + "/views",
		query: q.values(), want: http.StatusOK, out: &out})
	return out, err
}

// TopKind is what a top-K list ranks.
type TopKind string

const (
	TopItems TopKind = "items" // items by views, after the 30-minute viewer rule
	TopAds   TopKind = "ads"   // ads by clicks, after the click_id rule
)

// TopWindow is the span of event time a top-K list covers.
type TopWindow string

const (
	Window1m  TopWindow = "1m"  // exact
	Window1h  TopWindow = "1h"  // exact
	Window24h TopWindow = "24h" // within ErrorBound
)

// MaxTopK is the most entries one Top call may ask for.
const MaxTopK = 1000

// TopList is the latest top-K list topk published for a kind and window, cut to the k asked.
type TopList struct {
	Kind       TopKind    `json:"kind"`
	Window     TopWindow  `json:"window"`
	ComputedAt time.Time  `json:"computed_at"`
	From       time.Time  `json:"from"` // start of the event time counted, inclusive
	To         time.Time  `json:"to"`   // end, exclusive
	Exact      bool       `json:"exact"`
	ErrorBound int64      `json:"error_bound"` // 24h: every count is within this of the true one
	Entries    []TopEntry `json:"entries"`
}

// TopEntry is one place of a list; equal counts rank by key, ascending.
type TopEntry struct {
	Rank  int    `json:"rank"`
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

// Top reads the latest top-K list of kind over window (GET /v1/top), k entries at most (0: the
// server's default, 100).
func (c *Client) Top(ctx context.Context, kind TopKind, window TopWindow, k int) (TopList, error) {
	if k < 0 || k > MaxTopK {
		return TopList{}, fmt.Errorf("top: got k %d; want 0..%d", k, MaxTopK)
	}
	q := url.Values{"kind": {string(kind)}, "window": {string(window)}}
	if k > 0 {
		q.Set("k", strconv.Itoa(k))
	}
	var out TopList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/top", query: q, want: http.StatusOK, out: &out})
	return out, err
}
