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

// Series is a zero-filled series of views by event time.
type Series struct {
	ItemID      string      `json:"item_id"`
	Granularity Granularity `json:"granularity"`
	From        time.Time   `json:"from"`
	To          time.Time   `json:"to"`
	Points      []Point     `json:"points"`
}

// Point is one bucket of a series.
type Point struct {
	T     time.Time `json:"t"`
	Views int64     `json:"views"`
}

// Views reads an item's views series (GET /v1/items/{id}/views).
func (c *Client) Views(ctx context.Context, itemID string, q SeriesQuery) (Series, error) {
	var out Series
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/items/" + url.PathEscape(itemID) + "/views",
		query: q.values(), want: http.StatusOK, out: &out})
	return out, err
}
