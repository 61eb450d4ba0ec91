package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Click is one click on an ad (POST /v1/clicks, or a line of SendEvents). ClickID is the id
// minted when the ad was rendered (MintClickIDs); a retry of the click carries the same one.
// TS is optional (the current time, stamped once before the first attempt); FraudScore is sent
// when HasFraudScore.
type Click struct {
	ClickID, AdID, CampaignID, UserHash, IPHash, Device string
	TS                                                  time.Time
	FraudScore                                          float64
	HasFraudScore                                       bool
}

type clickJSON struct {
	Type       string   `json:"type,omitempty"`
	ClickID    string   `json:"click_id"`
	AdID       string   `json:"ad_id"`
	CampaignID string   `json:"campaign_id"`
	UserHash   string   `json:"user_hash"`
	IPHash     string   `json:"ip_hash"`
	Device     string   `json:"device"`
	TS         int64    `json:"ts"`
	FraudScore *float64 `json:"fraud_score,omitempty"`
}

func (k Click) fill(c *Client) clickJSON {
	if k.TS.IsZero() {
		k.TS = c.now()
	}
	j := clickJSON{Type: "click", ClickID: k.ClickID, AdID: k.AdID, CampaignID: k.CampaignID, UserHash: k.UserHash,
		IPHash: k.IPHash, Device: k.Device, TS: k.TS.UnixMilli()}
	if k.HasFraudScore {
		j.FraudScore = &k.FraudScore
	}
	return j
}

func (k Click) prepare(c *Client) ([]byte, error) { return json.Marshal(k.fill(c)) }

// SendClick posts one click (POST /v1/clicks) and returns once it is durable.
func (c *Client) SendClick(ctx context.Context, k Click) error {
	j := k.fill(c)
	j.Type = ""
	body, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode click: %w", err)
	}
	return c.call(ctx, request{method: http.MethodPost, path: "/v1/clicks", body: body,
		contentType: "application/json", want: http.StatusAccepted})
}

// MintedClickIDs are signed click ids for one ad, rendered at RenderedAt.
type MintedClickIDs struct {
	AdID       string    `json:"ad_id"`
	RenderedAt time.Time `json:"rendered_at"`
	KeyID      string    `json:"key_id"`
	ClickIDs   []string  `json:"click_ids"`
}

// MintClickIDs asks for n signed click ids for an ad being rendered
// (POST /v1/ads/{id}/click-ids). Minting twice only wastes ids, so it is retried like a read.
func (c *Client) MintClickIDs(ctx context.Context, adID string, n int) (MintedClickIDs, error) {
	var out MintedClickIDs
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/ads/" + url.PathEscape(adID) + "/click-ids",
		query: url.Values{"count": {strconv.Itoa(n)}}, want: http.StatusOK, out: &out})
	return out, err
}

// ClickSeries is a zero-filled series of clicks by event time: an ad's, a campaign's or a
// device's (the one of AdID, CampaignID and Device that is set).
type ClickSeries struct {
	AdID        string       `json:"ad_id,omitempty"`
	CampaignID  string       `json:"campaign_id,omitempty"`
	Device      string       `json:"device,omitempty"`
	Granularity Granularity  `json:"granularity"`
	From        time.Time    `json:"from"`
	To          time.Time    `json:"to"`
	Points      []ClickPoint `json:"points"`
}

// ClickPoint is one bucket: clicks after dedupe, the billable ones, and whether the numbers
// are the nightly job's exact report (day points only) rather than the streaming count.
type ClickPoint struct {
	T             time.Time `json:"t"`
	Count         int64     `json:"count"`
	BillableCount int64     `json:"billable_count"`
	Final         bool      `json:"final"`
}

// AdClicks reads an ad's click series (GET /v1/ads/{id}/clicks); Second is refused.
func (c *Client) AdClicks(ctx context.Context, adID string, q SeriesQuery) (ClickSeries, error) {
	return c.clickSeries(ctx, "/v1/ads/"+url.PathEscape(adID)+"/clicks", q)
}

// CampaignClicks reads a campaign's click series, summed over its ads
// (GET /v1/campaigns/{id}/clicks); Second is refused.
func (c *Client) CampaignClicks(ctx context.Context, campaignID string, q SeriesQuery) (ClickSeries, error) {
	return c.clickSeries(ctx, "/v1/campaigns/"+url.PathEscape(campaignID)+"/clicks", q)
}

// DeviceClicks reads a device's click series, summed over every ad (GET /v1/devices/{device}/clicks);
// Second is refused.
func (c *Client) DeviceClicks(ctx context.Context, device string, q SeriesQuery) (ClickSeries, error) {
	return c.clickSeries(ctx, "/v1/devices/"+url.PathEscape(device)+"/clicks", q)
}

func (c *Client) clickSeries(ctx context.Context, path string, q SeriesQuery) (ClickSeries, error) {
	var out ClickSeries
	err := c.call(ctx, request{method: http.MethodGet, path: path, query: q.values(), want: http.StatusOK, out: &out})
	return out, err
}

// Verdict is a fraud verdict on one click (a line of POST /v1/fraud-verdicts). AdID may be left
// empty when the click id is signed (the id carries its ad). DecidedAt is optional: the current
// time, stamped once before the first attempt. The latest decision per click wins, so a retry,
// which sends the same lines, changes nothing.
type Verdict struct {
	ClickID, AdID string
	Fraud         bool // false: "valid"
	Reason        string
	DecidedAt     time.Time
}

type verdictJSON struct {
	ClickID   string `json:"click_id"`
	AdID      string `json:"ad_id,omitempty"`
	Verdict   string `json:"verdict"`
	Reason    string `json:"reason,omitempty"`
	DecidedAt int64  `json:"decided_at"`
}

// SendVerdicts posts fraud verdicts as one NDJSON body (POST /v1/fraud-verdicts; the key needs
// scope fraud) and returns once the accepted ones are durable. Good lines are stored even when
// others are rejected: the result lists the rejected ones. When every line was rejected the
// error is an *APIError with status 400 and the result still lists them.
func (c *Client) SendVerdicts(ctx context.Context, vs ...Verdict) (Accepted, error) {
	if len(vs) == 0 {
		return Accepted{}, fmt.Errorf("send verdicts: got none; want at least one")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, v := range vs {
		if v.DecidedAt.IsZero() {
			v.DecidedAt = c.now()
		}
		j := verdictJSON{ClickID: v.ClickID, AdID: v.AdID, Verdict: "valid", Reason: v.Reason, DecidedAt: v.DecidedAt.UnixMilli()}
		if v.Fraud {
			j.Verdict = "fraud"
		}
		if err := enc.Encode(j); err != nil { // one line each: Encode ends it with a newline
			return Accepted{}, fmt.Errorf("encode verdict on click %s: %w", v.ClickID, err)
		}
	}
	var res Accepted
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/fraud-verdicts", body: buf.Bytes(),
		contentType: "application/x-ndjson", want: http.StatusAccepted, out: &res, decode400: true})
	return res, err
}

// DailyReport is one page of one version of a day's exact click report, as the nightly job
// (batchjob clicks) wrote it: the numbers to bill from, by ad (Ads) or, as the query asked, by
// campaign or device (Groups).
type DailyReport struct {
	Date          string       `json:"date"` // YYYY-MM-DD, UTC
	Version       uint32       `json:"version"`
	LatestVersion uint32       `json:"latest_version"`
	Final         bool         `json:"final"` // always true: reports are exact
	ComputedAt    time.Time    `json:"computed_at"`
	Totals        ReportTotals `json:"totals"`
	By            ReportBy     `json:"by"`
	Ads           []AdCount    `json:"ads"`
	Groups        []GroupCount `json:"groups"`
	// NextAfter, when not empty, is the After of the next page (ask with this Version to stay
	// on it).
	NextAfter string `json:"next_after"`
}

// ReportTotals sums a version over all its ads.
type ReportTotals struct {
	Ads           uint64 `json:"ads"`
	ExactCount    uint64 `json:"exact_count"`
	BillableCount uint64 `json:"billable_count"`
}

// AdCount is one ad's numbers in a report.
type AdCount struct {
	AdID          string `json:"ad_id"`
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

// ReportBy is what a report's rows count clicks by.
type ReportBy string

const (
	ReportByAd       ReportBy = "ad"
	ReportByCampaign ReportBy = "campaign"
	ReportByDevice   ReportBy = "device"
)

// ReportQuery selects a page; the zero value is the first page of the latest version by ad, with
// the server's page size (10,000 rows).
type ReportQuery struct {
	Version uint32   // 0: the latest complete version
	By      ReportBy // "": by ad
	After   string   // the ad id, campaign or device the page starts after: the previous page's NextAfter
	Limit   int      // rows per page, 1..100,000; 0: the server's default
}

// DailyReport reads a page of day's click report (GET /v1/reports/daily/{date}; the key needs
// scope billing). A day without a complete version, or without the version asked for, is an
// *APIError with status 404.
func (c *Client) DailyReport(ctx context.Context, day time.Time, q ReportQuery) (DailyReport, error) {
	v := url.Values{}
	if q.Version > 0 {
		v.Set("version", strconv.FormatUint(uint64(q.Version), 10))
	}
	if q.By != "" {
		v.Set("by", string(q.By))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out DailyReport
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/reports/daily/" + day.UTC().Format(time.DateOnly),
		query: v, want: http.StatusOK, out: &out})
	return out, err
}
