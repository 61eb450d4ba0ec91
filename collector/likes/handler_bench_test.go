package likes

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/redisclient"
)

// latencies collects request durations from many goroutines and reports their p50 and p99.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	at := func(q float64) float64 { return float64(l.d[int(q*float64(len(l.d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// timedDo sends one request, fails the benchmark unless it is answered want, and records its
// latency.
func timedDo(b *testing.B, c *http.Client, lat *latencies, method, url string, want int) {
	t0 := time.Now()
	code, body, err := do(c, method, url)
	lat.add(time.Since(t0))
	if err != nil || code != want {
		b.Fatalf("%s %s: got %d %s %v; want %d", method, url, code, body, err, want)
	}
}

// BenchmarkLikeUnlike is the write path end to end over HTTP: ready check, log write
// (acks=all) and the Redis apply with the total, alternating like and unlike on a hot item.
func BenchmarkLikeUnlike(b *testing.B) {
	e := newEnv(b, "bench-write")
	var lat latencies
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		method := http.MethodPut
		if i%2 == 1 {
			method = http.MethodDelete
		}
		timedDo(b, e.client, &lat, method, fmt.Sprintf("%s/v1/items/hot/likes/u%d", e.srv.URL, (i/2)%1000), http.StatusOK)
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkLikeUnlikeParallel is the same path under 16 concurrent clients per core on one hot
// item: the shards spread its writes over 16 keys.
func BenchmarkLikeUnlikeParallel(b *testing.B) {
	e := newEnv(b, "bench-write-par")
	var lat latencies
	var seq sync.Mutex
	next := 0
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			seq.Lock()
			i := next
			next++
			seq.Unlock()
			method := http.MethodPut
			if (i/10000)%2 == 1 {
				method = http.MethodDelete
			}
			timedDo(b, e.client, &lat, method, fmt.Sprintf("%s/v1/items/hot/likes/u%d", e.srv.URL, i%10000), http.StatusOK)
		}
	})
	b.StopTimer()
	lat.report(b)
}

// BenchmarkLikedBy20 is GET /v1/users/{id}/likes for a feed page of 20 items: one Redis
// pipeline.
func BenchmarkLikedBy20(b *testing.B) {
	e := newEnv(b, "bench-read")
	ids := make([]string, 20)
	deadline := time.Now().Add(time.Minute)
	for i := range ids {
		ids[i] = fmt.Sprintf("feed-%d", i)
		if i%2 == 0 {
			if _, err := change(e.client, e.srv.URL, ids[i], "reader", true, deadline); err != nil {
				b.Fatal(err)
			}
		}
	}
	url := e.srv.URL + "/v1/users/reader/likes?ids=" + strings.Join(ids, ",")
	var lat latencies
	b.ResetTimer()
	for b.Loop() {
		timedDo(b, e.client, &lat, http.MethodGet, url, http.StatusOK)
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkTotals20 is the like totals of a feed page of 20 items as GET /v1/counts reads them:
// one MGET of the ready marker and 20 total keys.
func BenchmarkTotals20(b *testing.B) {
	flushRedis(b)
	rdb := redisclient.Open(infra.Redis.Addr())
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if err := rdb.Set(ctx, likestate.ReadyKey, "1", 0).Err(); err != nil {
		b.Fatal(err)
	}
	items := make([]string, 20)
	for i := range items {
		items[i] = fmt.Sprintf("feed-item-%d", i)
		if err := rdb.Set(ctx, likestate.TotalKey(items[i]), i*likestate.Shards+likestate.Shards*(likestate.Shards-1)/2, 0).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		pipe := rdb.Pipeline()
		totals := likestate.QueueTotals(ctx, pipe, items)
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		got, err := totals()
		if err != nil {
			b.Fatal(err)
		}
		if want := int64(19*likestate.Shards + likestate.Shards*(likestate.Shards-1)/2); got["feed-item-19"] != want {
			b.Fatalf("total of feed-item-19: got %d; want %d", got["feed-item-19"], want)
		}
	}
}
