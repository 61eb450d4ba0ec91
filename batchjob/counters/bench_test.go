package counters

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
)

// BenchmarkReplay replays a day of adds to 10,000 counters of one namespace over 16 partitions
// (a tenth of them retried within the window), the recount's work per record after the read:
// decode, dedupe, tally. It reports the heap the replay holds per counted add.
func BenchmarkReplay(b *testing.B) {
	const n = 200_000
	log := make([][]byte, 0, n+n/10)
	for i := range n {
		e := schemas.CounterEvent{Op: schemas.CounterAdd, Namespace: "shares", Generation: 1, Name: fmt.Sprintf("c%d", i%10_000), Delta: 1,
			Token: fmt.Sprintf("tok-%d", i), TS: day.Add(time.Duration(i) * (24 * time.Hour / n)).UnixMilli(),
			Window: (24 * time.Hour).Milliseconds(), Retention: 90 * 86400}
		log = append(log, schemas.AppendCounterEvent(nil, e))
		if i%10 == 0 {
			log = append(log, log[len(log)-1])
		}
	}
	b.ReportAllocs()
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := NewReplay(map[string]uint64{"shares": 1}, day)
		for i, v := range log {
			r.Apply(int32(i%16), v)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if rows := r.Rows("shares", nil); len(rows) != 10_000 {
			b.Fatalf("got %d rows; want 10000", len(rows))
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/add")
		runtime.KeepAlive(r)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(log)), "ns/record")
}
