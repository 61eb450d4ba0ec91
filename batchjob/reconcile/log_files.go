package reconcile

import (
	"context"
	"fmt"
	"maps"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

// replayFiles reads the like log up to a snapshot as likestate.Replay does, but takes what it
// can from the sink's files, which keep likes longer than Kafka may: it snapshots the end
// offsets first, reads the flush markers and the sink group's committed offsets
// (rawlog.Complete), then per partition the files of the
// complete flushes, contiguous from the first, and last Kafka from where they end up to the
// snapshot. A partition whose files start after the Kafka log's start is read from Kafka alone
// (Kafka holds all of it); one whose files end (or break off) below the Kafka log's start is an
// error: the records in between are in neither, and state computed without them would be wrong.
// Rows the files hold at or above the snapshot are left out. It reports whether Kafka supplied
// any record.
func replayFiles(ctx context.Context, d Deps, st store.Store, fn func([]likestate.Record) error) (likestate.Snapshot, logread.Stats, bool, error) {
	var stats logread.Stats
	snap, starts, err := likestate.TakeSnapshot(ctx, d.Brokers, d.Topic, d.Logger, d.Dial...)
	if err != nil {
		return nil, stats, false, err
	}
	complete, err := rawlog.Complete(ctx, st, d.Topic, func() (map[int32]int64, error) {
		cl, err := kgo.NewClient(append(kafka.ClientOptions(d.Brokers, "tally-likes-replay", d.Logger, nil), d.Dial...)...)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		return kafka.GroupOffsets(ctx, cl, d.SinkGroup, d.Topic)
	})
	if err != nil {
		return nil, stats, false, err
	}
	first, end, err := rawlog.Days(ctx, st, d.Topic)
	if err != nil {
		return nil, stats, false, err
	}
	refs, err := rawlog.List(ctx, st, d.Topic, first, end)
	if err != nil {
		return nil, stats, false, fmt.Errorf("list %s files: %w", d.Topic, err)
	}
	use, from, err := planFiles(d.Topic, refs, complete, snap, starts)
	if err != nil {
		return nil, stats, false, err
	}
	lowest := maps.Clone(from) // each partition's first offset: its first file's, else the Kafka tail's
	for _, r := range use {
		lowest[r.Partition] = min(lowest[r.Partition], r.First)
	}
	d.setTotal(snap, lowest)
	var batch []likestate.Record
	err = rawlog.ReadInOrder(ctx, st, use, func(p int32, rows []rawlog.LikeRow) error {
		batch = batch[:0]
		for i := range rows {
			if rows[i].Offset < snap[p] {
				batch = append(batch, likestate.Record{Partition: p, Offset: rows[i].Offset, Like: rows[i].Like()})
			}
		}
		stats.Records += int64(len(batch))
		return fn(batch)
	})
	if err != nil {
		return nil, stats, false, fmt.Errorf("read %s files: %w", d.Topic, err)
	}
	tail, err := likestate.ReplayRange(ctx, d.Brokers, d.Topic, d.Logger, from, snap, fn, d.Dial...)
	stats.Records += tail.Records
	stats.Undecodable += tail.Undecodable
	return snap, stats, tail.Records > 0, err
}

// planFiles picks, per partition of the snapshot, the files to read (sorted as rawlog.List
// sorts) and the offset Kafka is read from after them.
func planFiles(topic string, refs []rawlog.FileRef, complete map[int32]int64, snap likestate.Snapshot, starts map[int32]int64) ([]rawlog.FileRef, map[int32]int64, error) {
	byPart := map[int32][]rawlog.FileRef{}
	for _, r := range refs {
		if c, ok := complete[r.Partition]; ok && r.First < c {
			byPart[r.Partition] = append(byPart[r.Partition], r)
		}
	}
	var use []rawlog.FileRef
	from := map[int32]int64{}
	for p := range snap {
		rs := byPart[p]
		start := starts[p]
		if len(rs) == 0 || rs[0].First > start {
			from[p] = start // Kafka holds everything the files could add
			continue
		}
		next, n := rs[0].First, 0
		for n < len(rs) && rs[n].First <= next { // the files of one flush share its range
			next = max(next, rs[n].Last+1)
			n++
		}
		if next < start {
			return nil, nil, fmt.Errorf("%s partition %d: the sink's files hold offsets %d to %d but Kafka starts at %d: records %d to %d are in neither; refusing to compute like state from a gap",
				topic, p, rs[0].First, next-1, start, next, start-1)
		}
		use = append(use, rs[:n]...)
		from[p] = next
	}
	return use, from, nil
}
