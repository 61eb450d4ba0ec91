package counters

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/tallypipeline/tally/schemas"
)

// BenchmarkApplyAdd measures the rule set's work per add (decode, dedupe by token, the minute
// sum) on one partition, flushed every 10,000 records as a busy partition is, and reports the
// memory each live token costs once its batch is written: the heap grown by the partition's
// dedupe state over the b.N tokens it holds (all within one 24-hour window).
func BenchmarkApplyAdd(b *testing.B) {
	const t0 = int64(1_800_000_000_000)
	vals := make([][]byte, b.N)
	for i := range vals {
		vals[i] = schemas.AppendCounterEvent(nil, schemas.CounterEvent{Op: schemas.CounterAdd, Namespace: "bench", Generation: 1, Name: "hot",
			Delta: 1, Token: fmt.Sprintf("token-%026d", i), TS: t0 + int64(i), Window: 24 * 3600 * 1000, Retention: 90 * 86400})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p := newPartition(0)
	b.ResetTimer()
	for i, v := range vals {
		p.apply(int64(i), nil, v)
		if p.records == 10000 {
			p.markFlushed()
		}
	}
	b.StopTimer()
	p.markFlushed()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if b.N >= 100000 {
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "bytes/token")
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(vals) // held across both readings: only the partition's growth is measured
}
