package likestate

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// Snapshot holds, per partition, the log's end offset when a replay began: the replay covers
// exactly the records below it, and a pair whose state carries an offset at or above it was
// changed after the snapshot.
type Snapshot map[int32]int64

// ReplayStats says what a replay read.
type ReplayStats struct {
	Records     int64 // records read, decodable or not
	Undecodable int64 // records skipped because they could not be decoded
}

// Replay reads topic from the log start up to the end offsets it snapshots first, with
// read_committed isolation, and calls fn with each polled batch of records, in log order within
// each partition. Undecodable records are skipped (and counted): they are skipped the same way
// by every replay and by the applier, so they never make two readers disagree. Progress is
// logged every 2 s. The likes topic is written without transactions, so the last record of a
// partition sits right below its end offset and the replay knows when it is done.
func Replay(ctx context.Context, brokers []string, topic string, logger *slog.Logger, fn func([]Record) error, dial ...kgo.Opt) (Snapshot, ReplayStats, error) {
	snap, starts, err := TakeSnapshot(ctx, brokers, topic, logger, dial...)
	if err != nil {
		return nil, ReplayStats{}, err
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
func ReplayRange(ctx context.Context, brokers []string, topic string, logger *slog.Logger, from map[int32]int64, snap Snapshot, fn func([]Record) error, dial ...kgo.Opt) (ReplayStats, error) {
	var stats ReplayStats
	want := map[int32]kgo.Offset{}
	var total int64
	for p, end := range snap {
		if f, ok := from[p]; ok && end > f {
			want[p] = kgo.NewOffset().At(f)
			total += end - f
		}
	}
	if len(want) == 0 {
		return stats, nil
	}
	cl, err := kgo.NewClient(append(append(kafka.ClientOptions(brokers, "tally-likes-replay", logger, nil), dial...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)...)
	if err != nil {
		return stats, fmt.Errorf("create replay consumer of %s: %w", topic, err)
	}
	defer cl.Close()

	t0, lastLog := time.Now(), time.Now()
	var batch []Record
	for len(want) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return stats, fmt.Errorf("replay %s: %w", topic, err)
		}
		fetches.EachError(func(t string, p int32, err error) {
			logger.Warn("replay fetch error; retrying", "topic", t, "partition", p, "err", err)
		})
		batch = batch[:0]
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			end := snap[ftp.Partition]
			if _, ok := want[ftp.Partition]; !ok {
				return
			}
			for _, r := range ftp.Records {
				if r.Offset >= end {
					break
				}
				stats.Records++
				l, err := schemas.DecodeLike(r.Value)
				if err != nil {
					stats.Undecodable++
				} else {
					batch = append(batch, Record{Partition: r.Partition, Offset: r.Offset, Like: l})
				}
				if r.Offset+1 >= end {
					delete(want, ftp.Partition)
					break
				}
			}
		})
		if err := fn(batch); err != nil {
			return stats, err
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			logger.Info("replaying like log", "topic", topic, "read", stats.Records, "of", total,
				"partitions_left", len(want), "took", time.Since(t0).Round(time.Millisecond))
		}
	}
	if stats.Undecodable > 0 {
		logger.Warn("like log holds undecodable records; skipped", "topic", topic, "count", stats.Undecodable)
	}
	return stats, nil
}

// TakeSnapshot lists the read_committed end offsets (the snapshot) and the start offsets of
// every partition of topic. A topic that does not exist yet is an empty log.
func TakeSnapshot(ctx context.Context, brokers []string, topic string, logger *slog.Logger, dial ...kgo.Opt) (Snapshot, map[int32]int64, error) {
	cl, err := kgo.NewClient(append(kafka.ClientOptions(brokers, "tally-likes-replay", logger, nil), dial...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("create admin client for %s: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := kafka.PartitionOffsets(topic, "end", func() (kadm.ListedOffsets, error) { return adm.ListCommittedOffsets(ctx, topic) })
	if err != nil {
		return nil, nil, err
	}
	starts, err := kafka.PartitionOffsets(topic, "start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	if err != nil {
		return nil, nil, err
	}
	return Snapshot(ends), starts, nil
}
