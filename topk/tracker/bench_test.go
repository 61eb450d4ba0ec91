package tracker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
)

// millionKeys returns a tracker holding 1,000,000 active keys, as a busy minute leaves it: each
// key counted in one second of the last minute (so it is in one 5-second bucket, one minute
// bucket and the hour's 24h summary), with Zipf-skewed counts. Applying goes through Apply,
// in records of the counted topic's size.
func millionKeys(b *testing.B, now time.Time) *Tracker {
	b.Helper()
	tr := New(Options{Shards: 16, Counters: 4096}, now)
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, 1<<20)
	const keys = 1_000_000
	var counts []schemas.BucketCount
	end := int64(0)
	for i := range keys {
		counts = append(counts, schemas.BucketCount{Key: fmt.Sprintf("item-%07d", i), Second: now.Unix() - 1 - rng.Int64N(55), Count: 1 + zipf.Uint64()%1000})
		if len(counts) == schemas.MaxCountedChunk || i == keys-1 {
			end += int64(len(counts))
			for _, c := range schemas.CountedRecords(schemas.CountItems, schemas.BatchID{Partition: 0, Epoch: 1, Start: end - int64(len(counts)), End: end}, counts) {
				tr.Apply(0, end, c)
			}
			counts = nil
		}
	}
	return tr
}

// BenchmarkMillionKeys measures the memory of 1,000,000 active keys (heap after GC, per key),
// the snapshot of them (bytes, seconds), and, per op, computing every list of a kind (what
// each publish does).
func BenchmarkMillionKeys(b *testing.B) {
	now := time.Unix(1_796_000_000, 0)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := millionKeys(b, now)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if st := tr.Stats(); st.Keys != 1_000_000 {
		b.Fatalf("got %d keys; want 1000000", st.Keys)
	}
	heap := float64(after.HeapAlloc - before.HeapAlloc)
	path := filepath.Join(b.TempDir(), "snap")
	t0 := time.Now()
	if err := tr.Save(path); err != nil {
		b.Fatal(err)
	}
	save := time.Since(t0)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	t0 = time.Now()
	if _, err := Load(path, Options{Shards: 16, Counters: 4096}, now); err != nil {
		b.Fatal(err)
	}
	load := time.Since(t0)
	for b.Loop() {
		if _, err := tr.Lists(schemas.CountItems, schemas.MaxTopK, now); err != nil {
			b.Fatal(err)
		}
	}
	// Reported after the loop: b.Loop's first call resets the timer and the extra metrics.
	b.ReportMetric(heap/1e6, "heap-MB")
	b.ReportMetric(heap/1_000_000, "heap-bytes/key")
	b.ReportMetric(float64(fi.Size())/1e6, "snapshot-MB")
	b.ReportMetric(save.Seconds(), "save-s")
	b.ReportMetric(load.Seconds(), "load-s")
	runtime.KeepAlive(tr)
}

// BenchmarkApply measures applying counted pairs (the aggregator publishes one per item and
// second with views), per pair, over a million-key Zipf workload.
func BenchmarkApply(b *testing.B) {
	now := time.Unix(1_796_000_000, 0)
	tr := New(Options{Shards: 16, Counters: 4096}, now)
	rng := rand.New(rand.NewPCG(3, 4))
	zipf := rand.NewZipf(rng, 1.1, 1, 1_000_000)
	const perRecord = 1000
	recs := make([]schemas.Counted, 64)
	for i := range recs {
		seen := map[string]bool{}
		var counts []schemas.BucketCount
		for len(counts) < perRecord {
			k := fmt.Sprintf("item-%d", zipf.Uint64())
			if seen[k] {
				continue
			}
			seen[k] = true
			counts = append(counts, schemas.BucketCount{Key: k, Second: now.Unix() - rng.Int64N(30), Count: 1 + rng.Uint64N(5)})
		}
		recs[i] = schemas.CountedRecords(schemas.CountItems, schemas.BatchID{}, counts)[0]
	}
	end := int64(0)
	for i := 0; b.Loop(); i++ {
		c := recs[i%len(recs)]
		end++
		c.Batch = schemas.BatchID{Partition: 0, Epoch: 1, End: end}
		tr.Apply(0, end, c)
	}
	b.ReportMetric(float64(b.N*perRecord)/b.Elapsed().Seconds(), "pairs/s")
}
