package likestate

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/schemas"
)

// Snapshot holds, per partition, the log's end offset when a replay began: the replay covers
// exactly the records below it, and a pair whose state carries an offset at or above it was
// changed after the snapshot.
type Snapshot map[int32]int64

// Replay reads topic from the log start up to the end offsets it snapshots first, with
// read_committed isolation (package logread), and calls fn with each polled batch of records, in
// log order within each partition. Undecodable records are skipped (and counted): they are
// skipped the same way by every replay and by the applier, so they never make two readers
// disagree.
func Replay(ctx context.Context, brokers []string, topic string, logger *slog.Logger, fn func([]Record) error, dial ...kgo.Opt) (Snapshot, logread.Stats, error) {
	snap, starts, err := TakeSnapshot(ctx, brokers, topic, logger, dial...)
	if err != nil {
		return nil, logread.Stats{}, err
	}
	stats, err := ReplayRange(ctx, brokers, topic, logger, starts, snap, fn, dial...)
	if err != nil {
		return nil, stats, err
	}
	return snap, stats, nil
}

// ReplayRange reads each partition of topic from from[p] up to snap[p] (partitions absent from
// from, or with nothing between, are not read), as Replay does: for a reader that has the log
// below from elsewhere (the sink's files).
func ReplayRange(ctx context.Context, brokers []string, topic string, logger *slog.Logger, from map[int32]int64, snap Snapshot, fn func([]Record) error, dial ...kgo.Opt) (logread.Stats, error) {
	var stats logread.Stats
	spans := map[int32]logread.Span{}
	for p, end := range snap {
		if f, ok := from[p]; ok {
			spans[p] = logread.Span{From: f, Stop: end}
		}
	}
	var batch []Record
	n, err := reader(brokers, logger, dial).Read(ctx, topic, spans, func(recs []*kgo.Record) error {
		batch = batch[:0]
		for _, r := range recs {
			l, err := schemas.DecodeLike(r.Value)
			if err != nil {
				stats.Undecodable++
				continue
			}
			batch = append(batch, Record{Partition: r.Partition, Offset: r.Offset, Like: l})
		}
		return fn(batch)
	})
	stats.Records = n
	if err != nil {
		return stats, err
	}
	if stats.Undecodable > 0 {
		logger.Warn("like log holds undecodable records; skipped", "topic", topic, "count", stats.Undecodable)
	}
	return stats, nil
}

// TakeSnapshot lists the read_committed end offsets (the snapshot) and the start offsets of
// every partition of topic. A topic that does not exist yet is an empty log.
func TakeSnapshot(ctx context.Context, brokers []string, topic string, logger *slog.Logger, dial ...kgo.Opt) (Snapshot, map[int32]int64, error) {
	starts, ends, err := reader(brokers, logger, dial).Offsets(ctx, topic)
	return Snapshot(ends), starts, err
}

func reader(brokers []string, logger *slog.Logger, dial []kgo.Opt) logread.Reader {
	return logread.Reader{Brokers: brokers, Dial: dial, Client: "tally-likes-replay", Logger: logger}
}
