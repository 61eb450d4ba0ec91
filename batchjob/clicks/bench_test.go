package clicks

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

// BenchmarkNightlyReplay measures the whole job over one day of the log: read the day's clicks
// (and the lookback) and every verdict, count, and write a version to the embedded ClickHouse;
// from the embedded broker (kafka) and from the sink's files of the same log (files: written
// with the sink's writer into tmpfs, flushes of 50,000 records, the sink group committed past
// them, so the run reads no Kafka tail). The day is CLICKS_BENCH_N clicks (default 500,000)
// over a fifth as many ads, with the test day's repeats and verdicts. Reports click records
// read per second, and the heap one distinct click id holds during the count.
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
	files := benchFiles(b, ctx)
	for _, tc := range []struct {
		name string
		src  Source
	}{{"kafka", source()}, {"files", files}} {
		b.Run(tc.name, func(b *testing.B) {
			d := d
			d.Source = tc.src
			cpu0 := cpuTime()
			var rep Report
			for b.Loop() {
				var err error
				if rep, err = Run(ctx, f.day, d); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(clickRecs)*float64(b.N)/b.Elapsed().Seconds(), "clicks/s")
			// CPU time is steadier than wall time on a shared machine: the process's user+system
			// time per click record, the embedded broker's and ClickHouse's share included.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(clickRecs*int64(b.N)), "cpu-ns/click")
			b.Logf("%d click records produced; last run: %s", clickRecs, rep.Summary())
		})
	}

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

// benchFiles writes the whole log (both topics) as the sink would, in flushes of 50,000 records
// per partition, and commits the sink group's offsets past them.
func benchFiles(b *testing.B, ctx context.Context) *FilesSource {
	dir := b.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "tally-bench-"); err == nil {
		dir = shm
		b.Cleanup(func() { os.RemoveAll(shm) })
	}
	st, err := store.NewLocal(dir)
	if err != nil {
		b.Fatal(err)
	}
	crecs, vrecs := readAll(b, ctx)
	commit := kadm.Offsets{}
	for _, recs := range [][]*kgo.Record{crecs, vrecs} {
		byPart := map[int32][]*kgo.Record{}
		for _, r := range recs {
			byPart[r.Partition] = append(byPart[r.Partition], r)
		}
		for p, rs := range byPart {
			slices.SortFunc(rs, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
			topic, _ := rawlog.TopicByName(rs[0].Topic)
			for i := 0; i < len(rs); i += 50_000 {
				chunk := rs[i:min(i+50_000, len(rs))]
				values := make([][]byte, len(chunk))
				for k, r := range chunk {
					values[k] = r.Value
				}
				if err := rawlog.WriteFlush(st, topic, p, chunk[0].Offset, values); err != nil {
					b.Fatal(err)
				}
			}
			commit.Add(kadm.Offset{Topic: rs[0].Topic, Partition: p, At: rs[len(rs)-1].Offset + 1, LeaderEpoch: -1})
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(infra.Kafka.Addr()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	const group = "bench-sink"
	if _, err := kadm.NewClient(cl).CommitOffsets(ctx, group, commit); err != nil {
		b.Fatal(err)
	}
	return NewFilesSource(st, source(), group)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
