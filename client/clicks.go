package client

import (
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

// ClickSeries is a zero-filled series of an ad's clicks by event time.
type ClickSeries struct {
	AdID        string       `json:"ad_id"`
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
	var out ClickSeries
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/ads/" + url.PathEscape(adID) + "/clicks",
		query: q.values(), want: http.StatusOK, out: &out})
	return out, err
}
