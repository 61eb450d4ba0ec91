package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

func viewCountJSON(item string, second int64, count int64, source string, seq int64) string {
	return fmt.Sprintf(`{"item_id":%q,"second":%d,"count":%d,"source_id":%q,"seq":%d}`, item, second, count, source, seq)
}

// Edge view counts posted to POST /v1/view-counts (one or an NDJSON batch) and as view_count
// lines of POST /v1/events: 202 only for what Kafka holds, on the views topic keyed by item, and
// 400s naming the field, per line in a batch.
func TestViewCountsAreValidatedAndDurable(t *testing.T) {
	k, err := kafkabroker.Start(kafkabroker.Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	h, cl := newHandler(t, []string{k.Addr()}, 1000, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, 2, schemas.TopicViews); err != nil {
		t.Fatal(err)
	}
	sec := time.Now().Unix() - 10
	tests := []struct {
		name         string
		path         string
		body         string
		wantCode     int
		wantAccepted int
		wantRejected map[int]string // line -> field
		wantField    string         // a single object's 400
	}{
		{"one", "/v1/view-counts", viewCountJSON("a", sec, 100, "edge-1", 1), 202, 1, nil, ""},
		{"batch", "/v1/view-counts", viewCountJSON("b", sec, 5, "edge-1", 2) + "\n" +
			viewCountJSON("b", sec, 0, "edge-1", 3) + "\n" +
			`{"type":"view_count","item_id":"c","second":` + itoa(sec) + `,"count":7,"source_id":"edge-2","seq":0}` + "\n" +
			viewCountJSON("d", sec, 1, "edge 1", 4) + "\n", 202, 2, map[int]string{2: "count", 4: "source_id"}, ""},
		{"events mix", "/v1/events", `{"type":"view","item_id":"e","viewer_id":"v"}` + "\n" +
			`{"type":"view_count","item_id":"f","second":` + itoa(sec) + `,"count":9,"source_id":"edge-3","seq":1}` + "\n" +
			`{"type":"view_count","item_id":"f","second":` + itoa(sec) + `,"count":9,"source_id":"edge-3"}` + "\n", 202, 2, map[int]string{3: "seq"}, ""},
		{"one bad", "/v1/view-counts", viewCountJSON("a", sec+3600, 1, "edge-1", 1), 400, 0, map[int]string{1: "second"}, ""},
		{"viewer field", "/v1/view-counts", `{"item_id":"a","viewer_id":"v","second":` + itoa(sec) + `,"count":1,"source_id":"e","seq":1}`, 400, 0, map[int]string{1: `"viewer_id"`}, ""},
		{"typed as view", "/v1/view-counts", `{"type":"view","item_id":"a","second":` + itoa(sec) + `,"count":1,"source_id":"e","seq":1}`, 400, 0, map[int]string{1: "type"}, ""},
		{"empty", "/v1/view-counts", "\n", 400, 0, nil, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(h, "POST", tt.path, tt.body)
			if w.Code != tt.wantCode {
				t.Fatalf("got %d %s; want %d", w.Code, w.Body, tt.wantCode)
			}
			if tt.wantField != "" {
				var e struct {
					Field string `json:"field"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Field != tt.wantField {
					t.Errorf("got %s; want an error naming %s", w.Body, tt.wantField)
				}
				return
			}
			var resp batchResponse
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			got := map[int]string{}
			for _, r := range resp.Rejected {
				got[r.Line] = r.Field
			}
			if resp.Accepted != tt.wantAccepted || fmt.Sprint(got) != fmt.Sprint(tt.wantRejected) {
				t.Errorf("got %d accepted, rejected %v; want %d, %v", resp.Accepted, got, tt.wantAccepted, tt.wantRejected)
			}
		})
	}
	consumer, err := kgo.NewClient(append(kafka.ClientOptions([]string{k.Addr()}, "test", quiet, nil),
		kgo.ConsumeTopics(schemas.TopicViews), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := map[string]schemas.ViewCount{}
	views := 0
	for len(got)+views < 5 {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if schemas.RecordKind(r.Value) == schemas.KindView {
				views++
				return
			}
			c, err := schemas.DecodeViewCount(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Key) != c.ItemID {
				t.Errorf("got key %q for item %q; want the item id", r.Key, c.ItemID)
			}
			got[c.ItemID] = c
		})
	}
	want := map[string]schemas.ViewCount{
		"a": {ItemID: "a", Second: sec, Count: 100, SourceID: "edge-1", Seq: 1},
		"b": {ItemID: "b", Second: sec, Count: 5, SourceID: "edge-1", Seq: 2},
		"c": {ItemID: "c", Second: sec, Count: 7, SourceID: "edge-2", Seq: 0},
		"f": {ItemID: "f", Second: sec, Count: 9, SourceID: "edge-3", Seq: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || views != 1 {
		t.Errorf("got %v and %d views in kafka; want %v and 1 view", got, views, want)
	}
}
