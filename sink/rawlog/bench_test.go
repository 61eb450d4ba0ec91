package rawlog

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/store"
)

// benchDay writes a day of views (perHour per hour over 8 partitions, one flush an hour per
// partition: files of the size a minute's flush has at 100,000 views/s are bigger still) into a
// local store, on tmpfs when there is one: the files' fsyncs are the sink's cost, not the
// reader's.
func benchDay(b *testing.B, perHour int) (store.Store, time.Time, int) {
	b.Helper()
	dir := b.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "tally-bench-"); err == nil {
		dir = shm
		b.Cleanup(func() { os.RemoveAll(shm) })
	}
	st, err := store.NewLocal(dir)
	if err != nil {
		b.Fatal(err)
	}
	views, _ := TopicByName(schemas.TopicViews)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const parts = 8
	const every = 60 // minutes
	perFlush := perHour / (60 / every) / parts
	offsets := make([]int64, parts)
	n := 0
	for m := 0; m < 24*60; m += every {
		for p := range int32(parts) {
			values := make([][]byte, perFlush)
			for i := range values {
				ts := day.Add(time.Duration(m)*time.Minute + time.Duration(i)*every*time.Minute/time.Duration(perFlush))
				values[i] = schemas.AppendView(nil, schemas.View{ItemID: fmt.Sprintf("item-%d", (i*7+m)%100000), ViewerID: fmt.Sprintf("viewer-%d", (i*13+m*31)%1000000),
					EventID: fmt.Sprintf("ev-%d-%d-%d", m, p, i), TS: ts.UnixMilli()})
			}
			if err := WriteFlush(st, views, p, offsets[p], values); err != nil {
				b.Fatal(err)
			}
			offsets[p] += int64(perFlush)
			n += perFlush
		}
	}
	return st, day, n
}

// BenchmarkReadDay reads a day of view files in log order, as the nightly jobs do, and reports
// events per second: every column (ViewRow), and the columns batchjob views reads (ViewKey).
func BenchmarkReadDay(b *testing.B) {
	st, day, n := benchDay(b, 120_000)
	b.Run("all columns", func(b *testing.B) { benchRead[ViewRow](b, st, day, n) })
	b.Run("ViewKey", func(b *testing.B) { benchRead[ViewKey](b, st, day, n) })
}

func benchRead[T Row](b *testing.B, st store.Store, day time.Time, n int) {
	files := Files[T]{Store: st, Topic: schemas.TopicViews}
	cpu0 := cpuTime()
	for b.Loop() {
		read := 0
		if err := files.Read(context.Background(), day, day.Add(24*time.Hour), func(_ int32, rows []T) error {
			read += len(rows)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if read != n {
			b.Fatalf("read %d; want %d", read, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(n)*float64(b.N)/(cpuTime()-cpu0).Seconds(), "events/cpu-s")
}

// cpuTime is the process's user and system CPU time so far: on a shared machine, events per
// CPU second say what a core does when it is not lent to others.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBatchAdd is the sink's cost per record: decode, Parquet encode and compress, write.
func BenchmarkBatchAdd(b *testing.B) {
	views, _ := TopicByName(schemas.TopicViews)
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixMilli()
	values := make([][]byte, 100_000)
	for i := range values {
		values[i] = schemas.AppendView(nil, schemas.View{ItemID: fmt.Sprintf("item-%d", i%100000), ViewerID: fmt.Sprintf("viewer-%d", i*13%1000000), EventID: fmt.Sprintf("ev-%d", i), TS: base + int64(i)})
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		batch := views.NewBatch(func(time.Time) (io.Writer, error) { return io.Discard, nil })
		for i, v := range values {
			if err := batch.Add(0, int64(i), v); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := batch.Close(); err != nil {
			b.Fatal(err)
		}
		n += len(values)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(n)/(cpuTime()-cpu0).Seconds(), "events/cpu-s")
}
