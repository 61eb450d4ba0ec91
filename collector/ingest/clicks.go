package ingest

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/schemas"
)

// maxMint bounds the click ids one POST /v1/ads/{ad_id}/click-ids returns (one per ad slot of
// a rendered page).
const maxMint = 100

// verifyClick checks c's click id against the configured keys: signed by one of them, minted
// for c's ad, rendered at most MaxRenderAge ago and not ahead of the clock by more than the
// future bound. Without keys every id is accepted.
func (h *Handler) verifyClick(c schemas.Click, now time.Time) error {
	if h.cfg.ClickKeys == nil {
		return nil
	}
	return h.cfg.ClickKeys.VerifyClick(c, schemas.ClickIDCheck{Now: now, MaxAge: h.cfg.MaxRenderAge, Future: h.cfg.Bounds.Future})
}

// verifyVerdict checks a signed click id of a verdict (any age: verdicts come late). An
// unsigned id is accepted with the ad_id it names (clicks from before a key was configured).
func (h *Handler) verifyVerdict(v schemas.FraudVerdict, now time.Time) error {
	if h.cfg.ClickKeys == nil {
		return nil
	}
	if _, signed := schemas.ParseClickID(v.ClickID); !signed {
		return nil
	}
	info, err := h.cfg.ClickKeys.Verify(v.ClickID, schemas.ClickIDCheck{Now: now, Future: h.cfg.Bounds.Future})
	if err != nil {
		return err
	}
	if info.AdID != v.AdID {
		return &schemas.FieldError{Field: "ad_id", Reason: fmt.Sprintf("is %q but the click id was minted for ad %q", v.AdID, info.AdID)}
	}
	return nil
}

func (h *Handler) serveClick(w http.ResponseWriter, r *http.Request) int {
	body, done, code, err := h.readBody(w, r)
	defer done()
	if err != nil {
		return api.Error(w, code, "body", err.Error())
	}
	now := h.now()
	c, err := schemas.ParseClickJSON(body, false, now, h.cfg.Bounds)
	if err == nil {
		err = h.verifyClick(c, now)
	}
	if err != nil {
		h.events.WithLabelValues("click", "rejected").Inc()
		return api.BadRequest(w, err)
	}
	if err := h.produce(r.Context(), []*kgo.Record{newRecordBuilder(h.cfg.Encoding, 1, 0).click(c)}); err != nil {
		h.events.WithLabelValues("click", "unavailable").Inc()
		return h.unavailable(w, err)
	}
	h.events.WithLabelValues("click", "accepted").Inc()
	return api.JSON(w, http.StatusAccepted, batchResponse{Accepted: 1, Rejected: []Rejection{}})
}

// serveVerdicts takes one verdict or an NDJSON batch of them.
func (h *Handler) serveVerdicts(w http.ResponseWriter, r *http.Request) int {
	return h.serveBatch(w, r, func(body []byte, now time.Time, rb *recordBuilder) (batch, error) {
		return eachLine(body, h.cfg.MaxLines, func(line []byte) (string, *kgo.Record, error) {
			v, err := schemas.ParseFraudVerdictJSON(line, now, h.cfg.Bounds)
			if err == nil {
				err = h.verifyVerdict(v, now)
			}
			if err != nil {
				return "fraud_verdict", nil, err
			}
			return "fraud_verdict", rb.verdict(v), nil
		})
	})
}

type mintResponse struct {
	AdID       string    `json:"ad_id"`
	RenderedAt time.Time `json:"rendered_at"`
	KeyID      string    `json:"key_id"`
	ClickIDs   []string  `json:"click_ids"`
}

// mintClickIDs answers POST /v1/ads/{ad_id}/click-ids?count=N with N (default 1) new signed
// click ids rendered now, for the ad server to put in its click URLs.
func (h *Handler) mintClickIDs(w http.ResponseWriter, r *http.Request) int {
	ad := r.PathValue("ad_id")
	if err := schemas.CheckID("ad_id", ad, true); err != nil {
		return api.BadRequest(w, err)
	}
	n := 1
	if s := r.URL.Query().Get("count"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > maxMint {
			return api.Error(w, http.StatusBadRequest, "count", fmt.Sprintf("got %q; want 1..%d", s, maxMint))
		}
	}
	if h.cfg.ClickKeys == nil {
		return api.Error(w, http.StatusConflict, "clicks.signing_key", "is not configured: this collector accepts unsigned click ids and mints none")
	}
	now := h.now().UTC().Truncate(time.Millisecond)
	resp := mintResponse{AdID: ad, RenderedAt: now, KeyID: h.cfg.ClickKeys.SigningKeyID(), ClickIDs: make([]string, 0, n)}
	for range n {
		id, err := h.cfg.ClickKeys.Mint(ad, now)
		if err != nil {
			return api.BadRequest(w, err)
		}
		resp.ClickIDs = append(resp.ClickIDs, id)
	}
	return api.JSON(w, http.StatusOK, resp)
}

// click returns c's record: topic clicks, keyed by ad_id.
func (rb *recordBuilder) click(c schemas.Click) *kgo.Record {
	start, mid := rb.key(c.AdID)
	rb.buf = rb.enc.AppendClick(rb.buf, c)
	return rb.record(schemas.TopicClicks, start, mid)
}

// verdict returns v's record: topic fraud_verdicts, keyed by its click's ad_id, so it lands in
// the partition that counted the click.
func (rb *recordBuilder) verdict(v schemas.FraudVerdict) *kgo.Record {
	start, mid := rb.key(v.AdID)
	rb.buf = rb.enc.AppendFraudVerdict(rb.buf, v)
	return rb.record(schemas.TopicFraudVerdicts, start, mid)
}
