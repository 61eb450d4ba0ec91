package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

func testClickKeys(t *testing.T) *schemas.ClickIDKeys {
	t.Helper()
	k, err := schemas.NewClickIDKeys("new", []schemas.ClickIDKey{{ID: "old", Secret: bytes.Repeat([]byte{1}, 32)}, {ID: "new", Secret: bytes.Repeat([]byte{2}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func clickJSON(id, ad string, extra string) string {
	return fmt.Sprintf(`{"click_id":%q,"ad_id":%q,"campaign_id":"c1","user_hash":"u1","ip_hash":"h1","device":"ios"%s}`, id, ad, extra)
}

// TestClicksAreValidatedAndDurable posts clicks, click lines among views, and verdicts to a real
// (embedded) broker with signing keys configured: 202 only for what Kafka holds, keyed by ad,
// and 400s naming the field for forged ids, ids of another ad, ids rendered too long ago, and
// malformed input.
func TestClicksAreValidatedAndDurable(t *testing.T) {
	k, err := kafkabroker.Start(kafkabroker.Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	h, cl := newHandler(t, []string{k.Addr()}, 1000, 5*time.Second)
	keys := testClickKeys(t)
	h.cfg.ClickKeys, h.cfg.MaxRenderAge = keys, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, 2, schemas.TopicViews, schemas.TopicClicks, schemas.TopicFraudVerdicts); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	mint := func(k *schemas.ClickIDKeys, ad string, at time.Time) string {
		id, err := k.Mint(ad, at)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	good := mint(keys, "ad-1", now.Add(-time.Minute))
	oldKey, err := schemas.NewClickIDKeys("old", []schemas.ClickIDKey{{ID: "old", Secret: bytes.Repeat([]byte{1}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	rotated := mint(oldKey, "ad-1", now.Add(-time.Minute))
	forger, err := schemas.NewClickIDKeys("new", []schemas.ClickIDKey{{ID: "new", Secret: bytes.Repeat([]byte{7}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		path      string
		body      string
		wantCode  int
		wantField string
	}{
		{"signed", "/v1/clicks", clickJSON(good, "ad-1", `,"fraud_score":0.2`), 202, ""},
		{"signed by a key being rotated out", "/v1/clicks", clickJSON(rotated, "ad-1", ""), 202, ""},
		{"forged", "/v1/clicks", clickJSON(mint(forger, "ad-1", now), "ad-1", ""), 400, "click_id"},
		{"other ad", "/v1/clicks", clickJSON(good, "ad-2", ""), 400, "click_id"},
		{"rendered too long ago", "/v1/clicks", clickJSON(mint(keys, "ad-1", now.Add(-2*time.Hour)), "ad-1", ""), 400, "click_id"},
		{"unsigned while a key is configured", "/v1/clicks", clickJSON("plain-1", "ad-1", ""), 400, "click_id"},
		{"missing campaign", "/v1/clicks", `{"click_id":"` + good + `","ad_id":"ad-1","user_hash":"u","ip_hash":"h","device":"d"}`, 400, "campaign_id"},
		{"bad score", "/v1/clicks", clickJSON(good, "ad-1", `,"fraud_score":3`), 400, "fraud_score"},
		{"ts too old", "/v1/clicks", clickJSON(good, "ad-1", `,"ts":"2001-01-01T00:00:00Z"`), 400, "ts"},
		{"verdict for a signed id", "/v1/fraud-verdicts", `{"click_id":"` + good + `","verdict":"fraud","reason":"bot","decided_at":` + itoa(now.UnixMilli()) + `}`, 202, ""},
		{"verdict for an unsigned id with its ad", "/v1/fraud-verdicts", `{"click_id":"plain-1","ad_id":"ad-1","verdict":"valid","decided_at":` + itoa(now.UnixMilli()) + `}`, 202, ""},
		{"verdict without ad for an unsigned id", "/v1/fraud-verdicts", `{"click_id":"plain-1","verdict":"fraud","decided_at":` + itoa(now.UnixMilli()) + `}`, 400, "ad_id"},
		{"verdict for a forged id", "/v1/fraud-verdicts", `{"click_id":"` + mint(forger, "ad-1", now) + `","verdict":"fraud","decided_at":` + itoa(now.UnixMilli()) + `}`, 400, "click_id"},
		{"verdict of another kind", "/v1/fraud-verdicts", `{"click_id":"plain-1","ad_id":"a","verdict":"maybe","decided_at":1}`, 400, "verdict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(h, "POST", tt.path, tt.body)
			if w.Code != tt.wantCode {
				t.Fatalf("got %d %s; want %d", w.Code, w.Body, tt.wantCode)
			}
			if tt.wantField == "" {
				return
			}
			var e struct {
				Field    string      `json:"field"`
				Rejected []Rejection `json:"rejected"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
				t.Fatal(err)
			}
			if len(e.Rejected) == 1 {
				e.Field = e.Rejected[0].Field
			}
			if e.Field != tt.wantField {
				t.Errorf("got field %q (%s); want %q", e.Field, w.Body, tt.wantField)
			}
		})
	}

	// A batch mixing views and clicks: per-line rejections name the line and field.
	body := `{"type":"view","item_id":"i1","viewer_id":"v1"}
{"type":"click",` + clickJSON(good, "ad-1", "")[1:] + `
{"type":"click",` + clickJSON(good, "ad-9", "")[1:] + `
{"type":"click","click_id":"` + good + `"}
`
	w := serve(h, "POST", "/v1/events", body)
	var resp batchResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 202 {
		t.Fatalf("got %d %s; want 202", w.Code, w.Body)
	}
	if resp.Accepted != 2 || len(resp.Rejected) != 2 || resp.Rejected[0].Line != 3 || resp.Rejected[0].Field != "click_id" ||
		resp.Rejected[1].Line != 4 || resp.Rejected[1].Field != "ad_id" {
		t.Errorf("got %+v; want 2 accepted, line 3 rejected on click_id and line 4 on ad_id", resp)
	}

	consumer, err := kgo.NewClient(append(kafka.ClientOptions([]string{k.Addr()}, "test", quiet, nil),
		kgo.ConsumeTopics(schemas.TopicClicks, schemas.TopicFraudVerdicts), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var clicks, verdicts int
	for clicks < 3 || verdicts < 2 {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("got %d clicks and %d verdicts: %v; want 3 and 2", clicks, verdicts, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var ad string
			switch r.Topic {
			case schemas.TopicClicks:
				c, err := schemas.DecodeClick(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				ad = c.AdID
				clicks++
			default:
				v, err := schemas.DecodeFraudVerdict(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				ad = v.AdID
				verdicts++
			}
			if string(r.Key) != ad || ad != "ad-1" {
				t.Errorf("got key %q for ad %q; want both ad-1", r.Key, ad)
			}
		})
	}
}

func TestMintClickIDs(t *testing.T) {
	h, _ := newHandler(t, []string{"127.0.0.1:1"}, 10, time.Second)
	if w := serve(h, "POST", "/v1/ads/ad-1/click-ids", ""); w.Code != 409 || !strings.Contains(w.Body.String(), "clicks.signing_key") {
		t.Errorf("without keys: got %d %s; want 409 naming clicks.signing_key", w.Code, w.Body)
	}
	keys := testClickKeys(t)
	h.cfg.ClickKeys, h.cfg.MaxRenderAge = keys, time.Hour
	tests := []struct {
		name     string
		path     string
		wantCode int
		wantN    int
	}{
		{"one", "/v1/ads/ad-1/click-ids", 200, 1},
		{"three", "/v1/ads/ad-1/click-ids?count=3", 200, 3},
		{"too many", "/v1/ads/ad-1/click-ids?count=101", 400, 0},
		{"not a number", "/v1/ads/ad-1/click-ids?count=x", 400, 0},
		{"bad ad", "/v1/ads/a%20b/click-ids", 400, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(h, "POST", tt.path, "")
			if w.Code != tt.wantCode {
				t.Fatalf("got %d %s; want %d", w.Code, w.Body, tt.wantCode)
			}
			if tt.wantCode != 200 {
				return
			}
			var resp mintResponse
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || len(resp.ClickIDs) != tt.wantN || resp.KeyID != "new" {
				t.Fatalf("got %s, %v; want %d ids signed with key new", w.Body, err, tt.wantN)
			}
			seen := map[string]bool{}
			for _, id := range resp.ClickIDs {
				c := schemas.Click{ClickID: id, AdID: "ad-1"}
				if err := keys.VerifyClick(c, schemas.ClickIDCheck{Now: time.Now(), MaxAge: time.Minute, Future: time.Minute}); err != nil || seen[id] {
					t.Errorf("minted id %q: %v (seen before: %v); want a fresh id that verifies", id, err, seen[id])
				}
				seen[id] = true
			}
		})
	}
}
