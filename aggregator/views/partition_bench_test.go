package views

import (
	"strconv"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
)

// BenchmarkPartitionProcess is the aggregator's per-record work: decode, dedupe, per-second
// delta, two sketch inserts. Half the records go to one hot item, as in the load target.
// Records repeat every 65,536, so after the first round most are duplicates.
func BenchmarkPartitionProcess(b *testing.B) {
	benchProcess(b, 1<<16, 200_000)
}

// BenchmarkPartitionProcessNewPairs is the same work with viewers drawn from 10M, as the load
// generator does: nearly every record is a new (viewer, item) pair, so the dedupe maps grow.
// Run it with -benchtime 1000000x or less, so no record repeats.
func BenchmarkPartitionProcessNewPairs(b *testing.B) {
	benchProcess(b, 1_000_000, 10_000_000)
}

// BenchmarkPartitionProcessManyItems is the same work over 1,000,000 items with none hot, as in
// the million-item load: nearly every record creates an item's two sketches, and every
// 100,000 records a sketch write takes their deltas. Run it with -benchtime 1000000x.
func BenchmarkPartitionProcessManyItems(b *testing.B) {
	recs := make([][]byte, 1_000_000)
	t0 := time.Now().UnixMilli()
	for i := range recs {
		recs[i] = schemas.AppendView(nil, schemas.View{ItemID: "item-" + strconv.Itoa(i*7919%len(recs)), ViewerID: "viewer-" + strconv.Itoa(i), TS: t0 + int64(i)})
	}
	runProcess(b, recs)
}

func benchProcess(b *testing.B, n, viewers int) {
	recs := make([][]byte, n)
	t0 := time.Now().UnixMilli()
	for i := range recs {
		item := "item-hot"
		if i%2 == 1 {
			item = "item-" + strconv.Itoa(i%1000)
		}
		recs[i] = schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: "viewer-" + strconv.Itoa(i*7919%viewers), TS: t0 + int64(i)})
	}
	runProcess(b, recs)
}

// runProcess processes recs round after round, flushing every 100,000 records.
func runProcess(b *testing.B, recs [][]byte) {
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 0, 0)
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.process(int64(i), recs[i%len(recs)], now)
		if i%100000 == 99999 {
			p.markFlushed(p.next, now)
			markSketched(p, now, time.Minute)
		}
	}
}

// BenchmarkPartitionProcessViewCounts is the same work for edge servers' view counts: decode,
// dedupe under (source, seq), per-second delta; no sketch. 100 sources each send one count per
// second for one of 1,000 items, a fifth of them retries; each count carries 10,000 views, so
// views/s carried = 10,000 x records/s.
func BenchmarkPartitionProcessViewCounts(b *testing.B) {
	const n = 1 << 16
	recs := make([][]byte, n)
	sec := time.Now().Unix()
	for i := range recs {
		if i%5 == 4 {
			recs[i] = recs[i-1] // a retry
			continue
		}
		recs[i] = schemas.AppendViewCount(nil, schemas.ViewCount{ItemID: "item-" + strconv.Itoa(i%1000), Second: sec + int64(i/100),
			Count: 10_000, SourceID: "edge-" + strconv.Itoa(i%100), Seq: uint64(i)})
	}
	runProcess(b, recs)
}

// BenchmarkSketchInterval is the in-process work of one sketch interval for 10,000 items, each
// with a day and an all-time sketch of whole viewers seen so far, taking 50 new viewers per
// interval, 5 s apart: the inserts, each delta's encoding and each whole sketch's estimate.
func BenchmarkSketchInterval(b *testing.B) {
	for _, whole := range []int{500, 900, 3000, 20000} {
		b.Run("whole="+strconv.Itoa(whole), func(b *testing.B) {
			sketches := make([]*sketch, 20_000)
			h := uint64(1)
			next := func() uint64 { h = h*6364136223846793005 + 1442695040888963407; return h }
			for i := range sketches {
				sk := &sketch{}
				for range whole {
					sk.insert(next(), time.Time{})
				}
				sk.current(time.Time{}, false)
				sketches[i] = sk
			}
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				now = now.Add(5 * time.Second)
				for _, sk := range sketches {
					sk.delta = viewerDelta{}
					for range 50 {
						sk.insert(next(), time.Time{})
					}
					if _, err := sk.delta.sketch().MarshalBinary(); err != nil {
						b.Fatal(err)
					}
					sk.current(now, false)
				}
			}
		})
	}
}

// BenchmarkSketchDeltaRows is the row building of one sketch write at a million items: 200,000
// sketches in memory, each with a delta of one new viewer (the shape of a large catalog with
// no hot item), of which the rows and estimates are built.
func BenchmarkSketchDeltaRows(b *testing.B) {
	p := newPartition(0, time.Minute, time.Minute, 0, 0)
	now := time.Now()
	for i := range 200_000 {
		sk := p.sketch(sketchKey{item: "item-" + strconv.Itoa(i), day: int32(i % 2)})
		p.insert(sk, uint64(i)*0x9e3779b97f4a7c15, now)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rows, _ := sketchDeltaRows([]*partition{p}, now, false)
		if err := encodeSketchRows(rows); err != nil {
			b.Fatal(err)
		}
	}
}
