package ingest

import (
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/schemas"
)

// serveViewCounts takes one edge view count or an NDJSON batch of them ("type" optional).
func (h *Handler) serveViewCounts(w http.ResponseWriter, r *http.Request) int {
	return h.serveBatch(w, r, func(body []byte, now time.Time, rb *recordBuilder) (batch, error) {
		return eachLine(body, h.cfg.MaxLines, func(line []byte) (string, *kgo.Record, error) {
			c, err := schemas.ParseViewCountJSON(line, false, now, h.cfg.Bounds)
			if err != nil {
				return "view_count", nil, err
			}
			return "view_count", rb.viewCount(c), nil
		})
	})
}

// viewCount returns c's record: topic views, keyed by item_id like a view, so an item's views
// and counts, and every retry of one count, land in one partition and one dedupe window.
func (rb *recordBuilder) viewCount(c schemas.ViewCount) *kgo.Record {
	start, mid := rb.key(c.ItemID)
	rb.buf = rb.enc.AppendViewCount(rb.buf, c)
	return rb.record(schemas.TopicViews, start, mid)
}
