package dedupe

import (
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkObserve measures the per-event decision on a window holding b.N distinct live pairs,
// and reports the memory each live pair costs (heap growth / pairs held).
func BenchmarkObserve(b *testing.B) {
	keys := make([]uint64, b.N)
	for i := range keys {
		keys[i] = Key("viewer-"+strconv.Itoa(i), "item-"+strconv.Itoa(i%1000))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := New(win, grac)
	t := int64(1_800_000_000_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Observe(keys[i], t+int64(i))
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if b.N >= 100000 {
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(w.Len()), "bytes/pair")
	}
	runtime.KeepAlive(w)
}

func BenchmarkKey(b *testing.B) {
	for i := 0; i < b.N; i++ {
		Key("viewer-123456", "item-42")
	}
}

// BenchmarkObserveTwoViews is BenchmarkObserve for pairs that each hold two counted views (one
// view, then one a window later): b.N events over b.N/2 pairs, and the memory each pair costs.
func BenchmarkObserveTwoViews(b *testing.B) {
	n := max(b.N/2, 1)
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = Key("viewer-"+strconv.Itoa(i), "item-"+strconv.Itoa(i%1000))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := New(win, grac)
	t := int64(1_800_000_000_000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Observe(keys[i%n], t+int64(i/n)*win)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n >= 100000 {
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(w.Len()), "bytes/pair")
	}
	runtime.KeepAlive(w)
}
