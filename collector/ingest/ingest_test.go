package ingest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"tally/collector/api"
	"tally/devstack/kafkabroker"
	"tally/platform/kafka"
	"tally/schemas"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newHandler(t *testing.T, brokers []string, maxBuffered int, timeout time.Duration) (*Handler, *kgo.Client) {
	t.Helper()
	cl, err := kgo.NewClient(append(kafka.ClientOptions(brokers, "test", quiet, nil), kafka.ProducerOptions(maxBuffered, timeout)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cfg := Config{MaxBodyBytes: 1 << 20, MaxLines: 100, MaxConcurrentBodies: 8, Bounds: schemas.TimeBounds{Future: time.Minute, Late: time.Hour}}
	return New(cfg, cl, time.Now, quiet, prometheus.NewRegistry()), cl
}

func serve(h *Handler, method, path, body string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	h.Register(api.NewRouter(mux, prometheus.NewRegistry()))
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w
}

// TestAcceptedMeansInKafka checks that a 202 is answered only for records Kafka holds, keyed by
// item, with the wire encoding the aggregator reads.
func TestAcceptedMeansInKafka(t *testing.T) {
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
	body := `{"type":"view","item_id":"a","viewer_id":"v1","ts":` + itoa(time.Now().UnixMilli()) + `}
{"type":"view","item_id":"b","viewer_id":"v2","event_id":"e2"}
{"type":"view","item_id":"","viewer_id":"v3"}
`
	w := serve(h, "POST", "/v1/events", body)
	var resp batchResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 202 {
		t.Fatalf("got %d %s; want 202", w.Code, w.Body)
	}
	if resp.Accepted != 2 || len(resp.Rejected) != 1 || resp.Rejected[0].Line != 3 || resp.Rejected[0].Field != "item_id" {
		t.Errorf("got %+v; want 2 accepted and line 3 rejected on item_id", resp)
	}
	consumer, err := kgo.NewClient(append(kafka.ClientOptions([]string{k.Addr()}, "test", quiet, nil),
		kgo.ConsumeTopics(schemas.TopicViews), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := map[string]schemas.View{}
	for len(got) < 2 {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v, err := schemas.DecodeView(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Key) != v.ItemID {
				t.Errorf("got key %q for item %q; want the item id", r.Key, v.ItemID)
			}
			got[v.ItemID] = v
		})
	}
	if got["b"].ViewerID != "v2" || got["b"].EventID != "e2" || got["a"].ViewerID != "v1" {
		t.Errorf("got %+v; want the posted views", got)
	}
}

// TestUnavailableKafka checks the two ways ingest refuses instead of queueing: a broker that does
// not answer within the produce timeout, and a full producer buffer.
func TestUnavailableKafka(t *testing.T) {
	dead := "127.0.0.1:1" // nothing listens there
	tests := []struct {
		name        string
		maxBuffered int
		timeout     time.Duration
		within      time.Duration
	}{
		{"broker down", 1000, time.Second, 5 * time.Second},
		{"buffer full", 1, 30 * time.Second, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := newHandler(t, []string{dead}, tt.maxBuffered, tt.timeout)
			t0 := time.Now()
			body := strings.Repeat(`{"type":"view","item_id":"a","viewer_id":"v"}`+"\n", 5)
			w := serve(h, "POST", "/v1/events", body)
			if w.Code != 503 || w.Header().Get("Retry-After") == "" {
				t.Errorf("got %d (Retry-After %q) %s; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
			}
			if d := time.Since(t0); d > tt.within {
				t.Errorf("answered after %s; want within %s", d, tt.within)
			}
		})
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
