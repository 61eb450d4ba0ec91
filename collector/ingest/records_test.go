package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// TestRecordBuilderMatchesViewRecord checks that a batch's records, built into shared buffers,
// are the ones viewRecord builds alone, and that building later ones (past both initial sizes,
// so the buffers are reallocated) leaves the earlier ones unchanged.
func TestRecordBuilderMatchesViewRecord(t *testing.T) {
	tests := []struct {
		name    string
		n, size int
	}{
		{"sized for the batch", 50, 1 << 16},
		{"buffers too small", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rb := newRecordBuilder(schemas.Encoding{}, tt.n, tt.size)
			var views []schemas.View
			var got []*kgo.Record
			for i := range 50 {
				v := schemas.View{ItemID: "item-" + strings.Repeat("x", i), ViewerID: "v" + strconv.Itoa(i), EventID: "e" + strconv.Itoa(i%3), TS: int64(i) * 1000}
				views = append(views, v)
				got = append(got, rb.view(v))
			}
			for i, v := range views {
				want := viewRecord(schemas.Encoding{}, v)
				if got[i].Topic != want.Topic || !bytes.Equal(got[i].Key, want.Key) || !bytes.Equal(got[i].Value, want.Value) {
					t.Errorf("record %d: got %s %q %x; want %s %q %x", i, got[i].Topic, got[i].Key, got[i].Value, want.Topic, want.Key, want.Value)
				}
			}
		})
	}
}

// TestReusedBuffersKeepAcceptedRecords posts many batches of many sizes at once, so record
// builders and body buffers are reused while other batches are parsed or in flight, and checks
// that Kafka holds every accepted view exactly as posted and that each answer names its own
// rejected line: a builder reused before its records were acknowledged, or a body buffer before
// its body was parsed, would overwrite them.
func TestReusedBuffersKeepAcceptedRecords(t *testing.T) {
	k, err := kafkabroker.Start(kafkabroker.Options{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{k.Addr()}, "test", quiet, nil), kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100_000, DeliveryTimeout: 10 * time.Second})...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, 2, schemas.TopicViews); err != nil {
		t.Fatal(err)
	}
	const posters, batches, lines = 32, 5, 200
	cfg := Config{MaxBodyBytes: 1 << 20, MaxLines: lines, MaxConcurrentBodies: posters, Bounds: schemas.TimeBounds{Future: time.Minute, Late: time.Hour}}
	h := New(cfg, cl, time.Now, quiet, prometheus.NewRegistry())
	mux := http.NewServeMux()
	h.Register(api.NewRouter(mux, prometheus.NewRegistry()))
	srv := httptestServer(t, mux)
	want := map[string]string{} // event id -> "item/viewer"
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range posters {
		wg.Go(func() {
			for b := range batches {
				var body strings.Builder
				good := 1 + (p*37+b*53)%(lines-1) // and one bad line after them
				for l := range good {
					id := fmt.Sprintf("e-%d-%d-%d", p, b, l)
					item, viewer := fmt.Sprintf("item-%d-%d", p, l%7), fmt.Sprintf("viewer-%d-%d-%d", p, b, l)
					fmt.Fprintf(&body, `{"type":"view","item_id":%q,"viewer_id":%q,"event_id":%q}`+"\n", item, viewer, id)
					mu.Lock()
					want[id] = item + "/" + viewer
					mu.Unlock()
				}
				fmt.Fprintf(&body, `{"type":"view","item_id":"bad item %d-%d","viewer_id":"v"}`+"\n", p, b)
				resp, err := http.Post(srv+"/v1/events", "application/x-ndjson", strings.NewReader(body.String()))
				if err != nil {
					t.Error(err)
					return
				}
				var answer batchResponse
				err = json.NewDecoder(resp.Body).Decode(&answer)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusAccepted {
					t.Errorf("got %d (%v); want 202", resp.StatusCode, err)
				} else if answer.Accepted != good || len(answer.Rejected) != 1 || answer.Rejected[0].Line != good+1 {
					t.Errorf("poster %d batch %d: got %+v; want %d accepted and line %d rejected", p, b, answer, good, good+1)
				}
			}
		})
	}
	wg.Wait()
	consumer, err := kgo.NewClient(append(kafka.ClientOptions([]string{k.Addr()}, "test", quiet, nil),
		kgo.ConsumeTopics(schemas.TopicViews), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := map[string]string{}
	for n := 0; n < len(want); {
		fs := consumer.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("got %v after %d of %d records; want all", err, n, len(want))
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			v, err := schemas.DecodeView(r.Value)
			if err != nil || string(r.Key) != v.ItemID {
				t.Errorf("got record key %q value %x (%v); want a view of that item", r.Key, r.Value, err)
				return
			}
			got[v.EventID] = v.ItemID + "/" + v.ViewerID
		})
	}
	if len(got) != len(want) {
		t.Errorf("got %d distinct events; want %d", len(got), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("event %s: got %q; want %q", id, got[id], w)
		}
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
