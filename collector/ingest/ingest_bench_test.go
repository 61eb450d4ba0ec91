package ingest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// BenchmarkServeEvents is one POST /v1/events of 1,000 view lines, shaped like the load
// generator's (no ts, no event id), through the handler into an embedded broker: parsing,
// building the records, and waiting for Kafka's acknowledgement. ns/line is per view.
func BenchmarkServeEvents(b *testing.B) {
	k, err := kafkabroker.Start(kafkabroker.Options{Dir: b.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{k.Addr()}, "bench", quiet, nil), kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100_000, DeliveryTimeout: 10 * time.Second})...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, 4, schemas.TopicViews); err != nil {
		b.Fatal(err)
	}
	const lines = 1000
	cfg := Config{MaxBodyBytes: 1 << 20, MaxLines: lines, Bounds: schemas.TimeBounds{Future: time.Minute, Late: time.Hour}}
	h := New(cfg, cl, time.Now, quiet, prometheus.NewRegistry())
	mux := http.NewServeMux()
	h.Register(api.NewRouter(mux, prometheus.NewRegistry()))
	var body bytes.Buffer
	for i := range lines {
		item := "load-i00000"
		if i%2 == 1 {
			item = fmt.Sprintf("load-i%05d", i*37%10000)
		}
		fmt.Fprintf(&body, `{"type":"view","item_id":%q,"viewer_id":"v%08d"}`+"\n", item, i*7919%10_000_000)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/v1/events", bytes.NewReader(body.Bytes()))
		req.Header.Set("Content-Type", "application/x-ndjson")
		mux.ServeHTTP(w, req)
		if w.Code != http.StatusAccepted {
			b.Fatalf("got %d %s; want 202", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
}
