package clicks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkNightlyReplay measures the whole job over one day of the log: read the day's clicks
// (and the lookback) and every verdict from the embedded broker, count, and write a version to
// the embedded ClickHouse. The day is CLICKS_BENCH_N clicks (default 500,000) over a fifth as
// many ads, with the test day's repeats and verdicts. Reports click records read per second,
// and the heap one distinct click id holds during the count.
//
//	go test -run '^$' -bench NightlyReplay -benchtime 3x ./batchjob/clicks/
func BenchmarkNightlyReplay(b *testing.B) {
	n := 500_000
	if v, err := strconv.Atoi(os.Getenv("CLICKS_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := newFixture(b, ctx, "bench", 40+n%97)
	recs := genDay(f.day, n, n/5, 5)
	produce(b, ctx, recs)
	var clickRecs int64
	for _, r := range recs {
		if r.Topic == "clicks" {
			clickRecs++
		}
	}
	d := f.deps()
	cpu0 := cpuTime()
	b.ResetTimer()
	var rep Report
	for b.Loop() {
		var err error
		if rep, err = Run(ctx, f.day, d); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(clickRecs)*float64(b.N)/b.Elapsed().Seconds(), "clicks/s")
	// CPU time is steadier than wall time on a shared machine: the process's user+system time
	// per click record, the embedded broker's and ClickHouse's share included.
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(clickRecs*int64(b.N)), "cpu-ns/click")
	b.Logf("%d click records produced; last run: %s", clickRecs, rep.Summary())

	// The count's memory: the heap a tally of the day holds.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	t, _, err := tally(ctx, f.day, d, "")
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	ids := len(t.clicks)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(ids), "heap-B/click_id")
	b.Logf("%d distinct click ids held, %s heap", ids, fmt.Sprintf("%.1f MiB", float64(after.HeapAlloc-before.HeapAlloc)/(1<<20)))
	runtime.KeepAlive(t)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
