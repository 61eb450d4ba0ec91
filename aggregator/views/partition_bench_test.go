package views

import (
	"strconv"
	"testing"
	"time"

	"tally/schemas"
)

// BenchmarkPartitionProcess is the aggregator's per-record work: decode, dedupe, per-second
// delta, two sketch inserts. Half the records go to one hot item, as in the load target.
func BenchmarkPartitionProcess(b *testing.B) {
	const n = 1 << 16
	recs := make([][]byte, n)
	t0 := time.Now().UnixMilli()
	for i := range recs {
		item := "item-hot"
		if i%2 == 1 {
			item = "item-" + strconv.Itoa(i%1000)
		}
		recs[i] = schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: "viewer-" + strconv.Itoa(i*7919%200000), TS: t0 + int64(i)})
	}
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 0, 0)
	now := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.process(int64(i), recs[i%n], now)
		if i%100000 == 99999 {
			p.markFlushed(p.next, now)
			p.markSketched(p.next, now, time.Minute)
		}
	}
}
