package views

import (
	"strconv"
	"testing"
	"time"

	"tally/schemas"
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
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 0, 0)
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.process(int64(i), recs[i%n], now)
		if i%100000 == 99999 {
			p.markFlushed(p.next, now)
			p.markSketched(p.next, now, time.Minute)
		}
	}
}
