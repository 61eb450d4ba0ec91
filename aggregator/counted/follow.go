package counted

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/schemas"
)

// Follow publishes one stream's durable batches to the topic, partition by partition and in
// offset order: a batch goes out when the topic is known to hold every batch of its partition
// before it, and otherwise the topic is caught up from what ClickHouse holds (CatchUp), so a
// crash or a failed publish between the durable write and the publish loses nothing. Errors are
// logged and counted, never returned to the flush: topk lagging never stops counting, and the
// partition's next batch tries again. A Follow is a value safe for concurrent use by the
// flushes of different partitions.
type Follow struct {
	Topic  Topic
	Kind   schemas.CountKind
	Now    func() time.Time
	Logger *slog.Logger
	Errors prometheus.Counter
}

// Batch publishes b, just made durable, with its counts. *end is the partition's offset up to
// which the topic is known to hold its batches (-1: unknown); it is b.End after a publish or a
// catch-up, -1 after a failure. A batch that counted nothing is not published (a catch-up skips
// it too). read is the partition's stored batches, for the catch-up. Without a topic it does
// nothing.
func (f Follow) Batch(ctx context.Context, end *int64, b schemas.BatchID, counts []schemas.BucketCount, read Reader) {
	if f.Topic == nil {
		return
	}
	if *end == b.Start {
		if len(counts) == 0 {
			*end = b.End
			return
		}
		err := f.Topic.Publish(ctx, f.Kind, b, counts)
		if err == nil {
			*end = b.End
			return
		}
		f.Logger.Warn("publish counted batch; catching up from clickhouse", "kind", f.Kind, "partition", b.Partition, "err", err)
	}
	f.CatchUp(ctx, f.Topic, end, b.Partition, b.End, read)
}

// Stored is one durable batch read back from an aggregator's store, for CatchUp.
type Stored struct {
	Epoch  uint64
	End    int64
	Counts []schemas.BucketCount
}

// Reader returns a partition's valid stored batches ending after after, in offset order, with
// their counts from since on (CatchUp).
type Reader func(after int64, since time.Time) ([]Stored, error)

// CatchUp publishes through t what read holds and the topic lacks of partition part, up to its
// checkpoint to, and sets *end to to; a failure sets *end to -1 and is logged and counted. t is
// f.Topic, or one that answers Last from a read already made. Without a topic it does nothing.
func (f Follow) CatchUp(ctx context.Context, t Topic, end *int64, part int32, to int64, read Reader) {
	if f.Topic == nil {
		return
	}
	n, err := f.publishMissing(ctx, t, part, read)
	if err != nil {
		f.Errors.Inc()
		*end = -1
		f.Logger.Warn("bring the counted topic up to the checkpoint; retrying at the next flush", "kind", f.Kind, "partition", part, "err", err)
		return
	}
	if n > 0 {
		f.Logger.Info("counted topic caught up from clickhouse", "kind", f.Kind, "partition", part, "batches", n, "to", to)
	}
	*end = to
}

// publishMissing publishes through t the durable batches of partition part that the topic
// lacks. It finds the last batch the topic holds (Last) and publishes again every batch read
// returns ending after that batch's start, each with its own epoch and end: the last batch may
// be cut short, and is completed in the same chunks (readers skip the chunks they have). With
// nothing published yet read gets after -1 and since now-25h, topk's longest window; otherwise
// since is the zero time. It returns how many batches it published.
func (f Follow) publishMissing(ctx context.Context, t Topic, part int32, read Reader) (int, error) {
	last, found, err := t.Last(ctx, f.Kind, part)
	if err != nil {
		return 0, err
	}
	from, since := int64(-1), f.Now().Add(-25*time.Hour)
	if found {
		from, since = last.Start, time.Time{}
	}
	batches, err := read(from, since)
	if err != nil {
		return 0, err
	}
	start, n := max(from, 0), 0
	for _, b := range batches {
		if found && b.Epoch < last.Epoch {
			continue // older than what readers have: they would refuse it anyway
		}
		if err := t.Publish(ctx, f.Kind, schemas.BatchID{Partition: part, Epoch: b.Epoch, Start: start, End: b.End}, b.Counts); err != nil {
			return n, err
		}
		start = b.End
		n++
	}
	return n, nil
}
