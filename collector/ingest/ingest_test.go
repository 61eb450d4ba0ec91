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

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newHandler(t *testing.T, brokers []string, maxBuffered int, timeout time.Duration) (*Handler, *kgo.Client) {
	t.Helper()
	cl, err := kgo.NewClient(append(kafka.ClientOptions(brokers, "test", quiet, nil), kafka.ProducerOptions(kafka.Producer{MaxBuffered: maxBuffered, DeliveryTimeout: timeout})...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cfg := Config{MaxBodyBytes: 1 << 20, MaxLines: 100, MaxConcurrentBodies: 8, Bounds: schemas.TimeBounds{Future: time.Minute, Late: time.Hour}}
	return New(cfg, cl, time.Now, quiet, prometheus.NewRegistry()), cl
}

// serve sends one request with a JSON body to h's routes.
func serve(h *Handler, method, path, body string) *httptest.ResponseRecorder {
	return serveTyped(h, method, path, "application/json", body)
}

// serveTyped sends one request with its body as contentType ("" sends none) to h's routes.
func serveTyped(h *Handler, method, path, contentType, body string) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	h.Register(api.NewRouter(mux, prometheus.NewRegistry()))
	w := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	mux.ServeHTTP(w, req)
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

// Every route that reads a body takes it only as JSON or NDJSON: a browser's cross-site form
// types and a missing type get 415 naming Content-Type, before a body slot is taken.
func TestBodyMustBeJSON(t *testing.T) {
	h, _ := newHandler(t, []string{"127.0.0.1:1"}, 1000, time.Second) // nothing listens: nothing may be produced
	for _, path := range []string{"/v1/views", "/v1/events", "/v1/view-counts", "/v1/clicks", "/v1/fraud-verdicts"} {
		for _, tt := range []struct {
			contentType string
			want        int
		}{
			{"application/json", 400}, // read and parsed: the empty object is no valid event
			{"application/x-ndjson", 400},
			{"application/ndjson; charset=utf-8", 400},
			{"APPLICATION/JSONL", 400},
			{"text/plain", 415},
			{"text/plain; charset=utf-8", 415},
			{"application/x-www-form-urlencoded", 415},
			{"multipart/form-data; boundary=b", 415},
			{"", 415},
		} {
			t.Run(path+" "+tt.contentType, func(t *testing.T) {
				w := serveTyped(h, "POST", path, tt.contentType, `{}`)
				var e struct{ Error, Field string }
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code != tt.want {
					t.Fatalf("got %d %s; want %d with a JSON error", w.Code, w.Body, tt.want)
				}
				if tt.want == 415 && (e.Field != "Content-Type" || !strings.Contains(e.Error, "application/json")) {
					t.Errorf("got %s; want the error on Content-Type naming the accepted types", w.Body)
				}
			})
		}
	}
	t.Run("checked before a body slot", func(t *testing.T) {
		for range cap(h.slots) {
			h.slots <- struct{}{}
		}
		defer func() {
			for range cap(h.slots) {
				<-h.slots
			}
		}()
		if w := serveTyped(h, "POST", "/v1/events", "text/plain", `{}`); w.Code != 415 {
			t.Errorf("with every slot taken: got %d %s; want 415", w.Code, w.Body)
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
