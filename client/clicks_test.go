package client

import (
	"context"
	"testing"
	"time"
)

// Verdicts go as NDJSON lines with the fields openapi.json names; decided_at, when left out, is
// stamped once, so a retry sends the same bytes and the latest-decision rule makes it a no-op.
func TestVerdictEncoding(t *testing.T) {
	busy := answer{status: 503, retryAfter: "0", body: `{"error":"busy"}`}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	c, s := newScripted(t, Options{MaxAttempts: 3, Now: func() time.Time { now = now.Add(time.Second); return now }},
		busy, answer{202, "", `{"accepted":2,"rejected":[]}`})
	res, err := c.SendVerdicts(context.Background(),
		Verdict{ClickID: "c1", AdID: "ad-1", Fraud: true, Reason: "chargeback", DecidedAt: time.UnixMilli(1796119207000)},
		Verdict{ClickID: "c2", AdID: "ad-1"})
	if err != nil || res.Accepted != 2 {
		t.Fatalf("got %+v, %v; want 2 accepted", res, err)
	}
	want := `{"click_id":"c1","ad_id":"ad-1","verdict":"fraud","reason":"chargeback","decided_at":1796119207000}
{"click_id":"c2","ad_id":"ad-1","verdict":"valid","decided_at":1796119201000}
`
	if len(s.bodies) != 2 || s.bodies[0] != want || s.bodies[1] != want {
		t.Fatalf("bodies: got %q; want two of %q", s.bodies, want)
	}
	if got := s.headers[0].Get("Content-Type"); got != "application/x-ndjson" {
		t.Errorf("content type: got %q; want application/x-ndjson", got)
	}
}

// Reads put their selection in the query the way openapi.json names it, and send nothing the
// caller left at its zero value.
func TestReadQueries(t *testing.T) {
	tests := []struct {
		name string
		call func(c *Client) error
		want string
	}{
		{"top with k", func(c *Client) error { _, err := c.Top(context.Background(), TopAds, Window24h, 10); return err },
			"/v1/top?k=10&kind=ads&window=24h"},
		{"top default k", func(c *Client) error { _, err := c.Top(context.Background(), TopItems, Window1m, 0); return err },
			"/v1/top?kind=items&window=1m"},
		{"report latest", func(c *Client) error {
			_, err := c.DailyReport(context.Background(), time.Date(2026, 3, 14, 23, 0, 0, 0, time.FixedZone("x", -3600)), ReportQuery{})
			return err
		}, "/v1/reports/daily/2026-03-15"},
		{"report page", func(c *Client) error {
			_, err := c.DailyReport(context.Background(), time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC), ReportQuery{Version: 3, After: "ad-9", Limit: 500})
			return err
		}, "/v1/reports/daily/2026-03-14?after=ad-9&limit=500&version=3"},
		{"report by device", func(c *Client) error {
			_, err := c.DailyReport(context.Background(), time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC), ReportQuery{By: ReportByDevice, After: "desktop"})
			return err
		}, "/v1/reports/daily/2026-03-14?after=desktop&by=device"},
		{"ad clicks", func(c *Client) error {
			_, err := c.AdClicks(context.Background(), "ad-7", SeriesQuery{Granularity: Hour})
			return err
		},
			"/v1/ads/ad-7/clicks?granularity=hour"},
		{"campaign clicks", func(c *Client) error {
			_, err := c.CampaignClicks(context.Background(), "cmp 1", SeriesQuery{Granularity: Day})
			return err
		}, "/v1/campaigns/cmp%201/clicks?granularity=day"},
		{"device clicks", func(c *Client) error {
			_, err := c.DeviceClicks(context.Background(), "ios", SeriesQuery{})
			return err
		},
			"/v1/devices/ios/clicks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := newScripted(t, Options{}, answer{200, "", `{}`})
			if err := tt.call(c); err != nil {
				t.Fatal(err)
			}
			if got := s.urls[0]; got != tt.want {
				t.Errorf("request: got %s; want %s", got, tt.want)
			}
		})
	}
}
