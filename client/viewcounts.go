package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// ViewCount is an edge server's count of one item's views in one second (POST /v1/view-counts,
// or a line of SendEvents or a Batcher), for traffic too large to send view by view. SourceID and
// Seq identify it: the server counts it once however often it is sent, so the caller numbers its
// records and sends a record again with the same Seq (and the same other fields). Second is
// truncated to the second; it has no default.
type ViewCount struct {
	ItemID   string
	Second   time.Time
	Count    uint64
	SourceID string
	Seq      uint64
}

type viewCountJSON struct {
	Type     string `json:"type,omitempty"`
	ItemID   string `json:"item_id"`
	Second   int64  `json:"second"`
	Count    uint64 `json:"count"`
	SourceID string `json:"source_id"`
	Seq      uint64 `json:"seq"`
}

func (v ViewCount) json(typ string) viewCountJSON {
	return viewCountJSON{Type: typ, ItemID: v.ItemID, Second: v.Second.Unix(), Count: v.Count, SourceID: v.SourceID, Seq: v.Seq}
}

func (v ViewCount) prepare(*Client) ([]byte, error) { return json.Marshal(v.json("view_count")) }

// SendViewCount posts one view count (POST /v1/view-counts) and returns once it is durable.
func (c *Client) SendViewCount(ctx context.Context, v ViewCount) error {
	body, err := json.Marshal(v.json(""))
	if err != nil {
		return fmt.Errorf("encode view count: %w", err)
	}
	return c.call(ctx, request{method: http.MethodPost, path: "/v1/view-counts", body: body,
		contentType: "application/json", want: http.StatusAccepted})
}
