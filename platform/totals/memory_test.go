package totals

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkMemoryPerItem fills the totals and unique estimates of n items (ids like a feed's,
// "item-123456") and reports Redis's used_memory per item and the share of buckets still
// listpack-encoded. Run with -benchtime 1x: it measures memory, not time.
func BenchmarkMemoryPerItem(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				before := usedMemory(b)
				s := New(rdb, "views")
				values := make(map[string]int64, n)
				unique := make(map[string]uint64, n)
				for i := range n {
					id := fmt.Sprintf("item-%d", i)
					values[id] = int64(1000 + i%100000)
					unique[id] = uint64(100 + i%10000)
				}
				if err := s.Set(ctx, 0, Guard{Epoch: 1, End: 1, Chunk: AllChunks}, values); err != nil {
					b.Fatal(err)
				}
				if err := s.SetUnique(ctx, unique); err != nil {
					b.Fatal(err)
				}
				used := usedMemory(b) - before
				listpacks, buckets := 0, 0
				for bk := range uint64(Buckets) {
					enc, err := rdb.ObjectEncoding(ctx, s.viewsKey(bk)).Result()
					if err == nil { // an empty bucket has no key
						buckets++
						if enc == "listpack" {
							listpacks++
						}
					}
				}
				b.ReportMetric(float64(used)/float64(n), "B/item")
				b.ReportMetric(float64(listpacks)/float64(buckets)*100, "%listpack")
			}
		})
	}
}

func usedMemory(b *testing.B) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// BenchmarkMemoryKeyPerItem is the layout not taken, for comparison: one plain key per item for
// the total and one for the estimate.
func BenchmarkMemoryKeyPerItem(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	for range b.N {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		before := usedMemory(b)
		pipe := rdb.Pipeline()
		for i := range n {
			id := fmt.Sprintf("item-%d", i)
			pipe.Set(ctx, "t:v:"+id, 1000+i%100000, 0)
			pipe.Set(ctx, "t:u:"+id, 100+i%10000, 0)
			if i%10000 == 9999 {
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(usedMemory(b)-before)/n, "B/item")
	}
}

// BenchmarkQueuePage reads feed pages of 20 items (the Queue of the collector's counts, one
// round trip) from totals of a million items and reports the round trip's percentiles.
func BenchmarkQueuePage(b *testing.B) {
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	s := New(rdb, "views")
	const n = 1_000_000
	values := make(map[string]int64, n)
	for i := range n {
		values[fmt.Sprintf("item-%d", i)] = int64(i)
	}
	if err := s.Set(ctx, 0, Guard{Epoch: 1, End: 0, Chunk: AllChunks}, values); err != nil {
		b.Fatal(err)
	}
	page := make([]string, 20)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		for j := range page {
			page[j] = fmt.Sprintf("item-%d", (i*7919+j*104729)%n)
		}
		t0 := time.Now()
		pipe := rdb.Pipeline()
		res := s.Queue(ctx, pipe, page)
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := res(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkApply applies batches of 10,000 distinct items to totals of a million items (the
// aggregator's flush at a large catalog) and reports the time per item.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	s := New(rdb, "views")
	const n, batch = 1_000_000, 10_000
	values := make(map[string]int64, n)
	for i := range n {
		values[fmt.Sprintf("item-%d", i)] = 1
	}
	if err := s.Set(ctx, 0, Guard{Epoch: 1, End: 0, Chunk: AllChunks}, values); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		deltas := make(map[string]int64, batch)
		for j := range batch {
			deltas[fmt.Sprintf("item-%d", (i*batch+j*97)%n)] = 1
		}
		if _, err := s.Apply(ctx, 0, 1, Unchecked, int64(i+1), deltas); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/item")
}
