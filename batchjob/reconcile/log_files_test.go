package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
	"github.com/tallypipeline/tally/sink/storetest"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The real sink writes the like log into files; more changes follow that only Kafka holds. A run
// from the files (with that tail) finds the derived stores right, as a run from Kafka does.
// Then Kafka drops the start of a partition: the files still hold it and the run from them
// still reads every record, while files that end before Kafka's new start are a gap the run refuses.
func TestFilesMatchKafka(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "files")
	day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	f.produce(t, ctx, genLikes(360, day))
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	group := f.topic + "-sink"
	topic, _ := rawlog.TopicByName(schemas.TopicLikes)
	topic.Name = f.topic
	storetest.CatchUp(t, ctx, infra.Kafka.Addr(), group, st, topic)
	// The tail flips every pair of item-0 and item-3.
	var tail []schemas.Like
	for _, l := range genLikes(360, day)[300:] {
		if l.ItemID == "item-0" || l.ItemID == "item-3" {
			l.Liked = !l.Liked
			l.TS += 3600_000
			tail = append(tail, l)
		}
	}
	f.produce(t, ctx, tail)
	want := f.oracle(t, ctx)
	f.derive(t, ctx, want)

	run := func(t *testing.T, files store.Store) (Report, error) {
		d := f.deps()
		d.Files, d.SinkGroup = files, group
		d.Progress = progress.Start(progress.Options{What: "like records", Never: true})
		rep, err := Run(ctx, Job{All: true}, d)
		d.Progress.Stop()
		// The progress line's total is known before the read and is what the read found.
		if want := fmt.Sprintf("progress: %d/%d like records (100%%)", rep.Records, rep.Records); err == nil && !strings.HasPrefix(d.Progress.Line(), want) {
			t.Errorf("progress: got %q; want it to start %q", d.Progress.Line(), want)
		}
		return rep, err
	}
	records := int64(360 + len(tail))
	for _, tc := range []struct {
		source string
		files  store.Store
	}{{"kafka", nil}, {"parquet+kafka", st}} {
		t.Run(tc.source, func(t *testing.T) {
			rep, err := run(t, tc.files)
			if err != nil || rep.Source != tc.source || rep.Differences != 0 || rep.Records != records {
				t.Fatalf("got %s, %v; want 0 differences over %d records from %s", rep.Summary(), err, records, tc.source)
			}
		})
	}

	// Kafka drops the first half of the busiest partition.
	cl, err := kgo.NewClient(kgo.SeedBrokers(infra.Kafka.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	var busiest kadm.ListedOffset
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > busiest.Offset {
			busiest = o
		}
	})
	cut := kadm.Offsets{}
	cut.Add(kadm.Offset{Topic: f.topic, Partition: busiest.Partition, At: busiest.Offset / 2, LeaderEpoch: -1})
	if res, err := adm.DeleteRecords(ctx, cut); err != nil || res.Error() != nil {
		t.Fatalf("delete records below %d of partition %d: %v %v", busiest.Offset/2, busiest.Partition, err, res.Error())
	}
	t.Run("kafka trimmed", func(t *testing.T) {
		if rep, err := run(t, st); err != nil || rep.Differences != 0 || rep.Records != records {
			t.Fatalf("from the files: got %s, %v; want 0 differences over all %d records", rep.Summary(), err, records)
		}
		if rep, err := run(t, nil); err != nil || rep.Records != records-busiest.Offset/2 {
			t.Fatalf("from Kafka alone: got %s, %v; want %d records (the log lost %d)", rep.Summary(), err, records-busiest.Offset/2, busiest.Offset/2)
		}
	})
	t.Run("gap", func(t *testing.T) {
		// Files of the partition's first few records only, as if the sink had stopped there.
		gap, err := store.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		values := make([][]byte, 10)
		for i := range values {
			values[i] = schemas.AppendLike(nil, schemas.Like{ItemID: "x", UserID: fmt.Sprint(i), Liked: true, TS: day.UnixMilli()})
		}
		if err := rawlog.WriteFlush(gap, topic, busiest.Partition, 0, values); err != nil {
			t.Fatal(err)
		}
		if err := rawlog.WriteFlush(gap, topic, busiest.Partition, 10, values[:1]); err != nil { // the marker's flush, not committed
			t.Fatal(err)
		}
		rep, err := run(t, gap)
		if err == nil || !strings.Contains(err.Error(), "refusing to compute like state from a gap") {
			t.Fatalf("got %s, %v; want a gap error", rep.Summary(), err)
		}
	})
}
