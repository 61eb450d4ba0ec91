package counters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// maxTail bounds the records an accurate read fetches from one partition: past it the
// aggregators are far behind, and the read is answered 503 rather than fetching the backlog.
const maxTail = 1_000_000

// errTailTooLong is a partition whose records after the checkpoint are more than maxTail.
var errTailTooLong = errors.New("the counters stream is too far behind for an accurate read")

// tail reads what the log holds after a checkpoint: the records of one partition of a topic,
// from an offset up to the partition's high watermark when the read began, which every
// acknowledged record is below. It sends its own Fetch requests to the partition's leader
// through the client it is given (the collector's producer), so it joins no group and holds no
// consumer state; it is safe for concurrent use.
type tail struct {
	cl    *kgo.Client
	topic string
}

// layout is what a read needs of the topic: its id (Fetch names topics by id from version 13)
// and its partitions' leaders.
type layout struct {
	id      [16]byte
	leaders []int32 // by partition
}

// layout asks the cluster for the topic's layout.
func (t tail) layout(ctx context.Context) (layout, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(t.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.cl)
	if err != nil {
		return layout{}, fmt.Errorf("read the layout of %s: %w", t.topic, err)
	}
	if len(resp.Topics) != 1 {
		return layout{}, fmt.Errorf("read the layout of %s: got %d topics", t.topic, len(resp.Topics))
	}
	mt := resp.Topics[0]
	if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
		return layout{}, fmt.Errorf("read the layout of %s: %w", t.topic, err)
	}
	l := layout{id: mt.TopicID, leaders: make([]int32, len(mt.Partitions))}
	for _, p := range mt.Partitions {
		if int(p.Partition) >= len(l.leaders) {
			return layout{}, fmt.Errorf("read the layout of %s: partition %d of %d", t.topic, p.Partition, len(l.leaders))
		}
		l.leaders[p.Partition] = p.Leader
	}
	return l, nil
}

// partitionOf is the partition the producer writes key to: the default (Kafka-compatible)
// key hash over the topic's partitions.
func (t tail) partitionOf(l layout, key []byte) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(t.topic).Partition(&kgo.Record{Key: key}, len(l.leaders)))
}

// read returns partition p's records from offset from (or the log's start, if it is later) to
// the high watermark seen by the first fetch.
func (t tail) read(ctx context.Context, l layout, p int32, from int64) ([]*kgo.Record, error) {
	var out []*kgo.Record
	end := int64(-1)
	moves := 0
	for end < 0 || from < end {
		rp, err := t.fetch(ctx, l, p, from)
		if err != nil {
			return nil, err
		}
		if errors.Is(kerr.ErrorForCode(rp.ErrorCode), kerr.OffsetOutOfRange) && from < rp.LogStartOffset {
			from = rp.LogStartOffset // the records before are gone from the log, and counted
			continue
		}
		if leaderMoved(rp.ErrorCode) && moves < maxLeaderMoves {
			moves++
			if l, err = t.relayout(ctx, moves); err != nil {
				return nil, err
			}
			continue
		}
		if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
			return nil, fmt.Errorf("read partition %d of %s from %d: %w", p, t.topic, from, err)
		}
		if end < 0 {
			end = rp.HighWatermark
			if end-from > maxTail {
				return nil, fmt.Errorf("partition %d holds %d records after offset %d: %w", p, end-from, from, errTailTooLong)
			}
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: from, Topic: t.topic, Partition: p}, rp, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return nil, fmt.Errorf("decode partition %d of %s from %d: %w", p, t.topic, from, fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset < end {
				out = append(out, r)
			}
		}
		if next <= from && from < end {
			return nil, fmt.Errorf("read partition %d of %s: no record at %d below the end %d", p, t.topic, from, end)
		}
		from = next
	}
	return out, nil
}

// maxLeaderMoves is how many times one read follows its partition's leader to another broker
// (an election, a rolling restart) before it gives up.
const maxLeaderMoves = 3

// leaderMoved reports whether a fetch was refused because the broker no longer leads the
// partition, or not yet: a fresh layout names the leader to ask.
func leaderMoved(code int16) bool {
	err := kerr.ErrorForCode(code)
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.LeaderNotAvailable) ||
		errors.Is(err, kerr.FencedLeaderEpoch) || errors.Is(err, kerr.UnknownLeaderEpoch)
}

// relayout reads the layout again after the moves-th leader move of a read, waiting a little
// longer each time for the cluster's metadata to name the new leader.
func (t tail) relayout(ctx context.Context, moves int) (layout, error) {
	select {
	case <-ctx.Done():
		return layout{}, ctx.Err()
	case <-time.After(time.Duration(moves*moves) * 25 * time.Millisecond):
	}
	return t.layout(ctx)
}

// fetch sends one Fetch of partition p from offset from to its leader.
func (t tail) fetch(ctx context.Context, l layout, p int32, from int64) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MinBytes, req.MaxWaitMillis = 1, 0 // answer at once: the tail is there already
	req.MaxBytes = 16 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = t.topic, l.id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, from, 16<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := t.cl.Broker(int(l.leaders[p])).Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("fetch partition %d of %s from %d: %w", p, t.topic, from, err)
	}
	fr := resp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(fr.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetch partition %d of %s from %d: %w", p, t.topic, from, err)
	}
	if len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("fetch partition %d of %s from %d: the answer holds no partition", p, t.topic, from)
	}
	return &fr.Topics[0].Partitions[0], nil
}
