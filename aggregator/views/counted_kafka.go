package views

import (
	"context"
	"fmt"
	"time"

	"github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/schemas"
)

// Deduplicated counts for topk (aggregator/counted): each batch's (item, second, views) is
// published after the batch is durable in ClickHouse. A partition whose publish failed, or that
// was just assigned, first publishes the valid batches ClickHouse holds past the last one the
// counted topic holds, so a crash between the durable write and the publish loses nothing;
// topk's guards skip whatever is published twice.

// secondCounts returns the pending batch's deltas as counted pairs.
func (p *partition) secondCounts() []schemas.BucketCount {
	out := make([]schemas.BucketCount, 0, len(p.deltas))
	for k, n := range p.deltas {
		out = append(out, schemas.BucketCount{Key: k.item, Second: k.second, Count: n})
	}
	return out
}

// follow is how this stream's batches reach the counted topic.
func (a *Aggregator) follow() counted.Follow {
	return counted.Follow{Topic: a.cfg.Counted, Kind: schemas.CountItems, Now: a.now, Logger: a.logger, Errors: a.m.countedErrors}
}

// syncCounted publishes the batch just written (counts, from offset from to p.flushed).
func (a *Aggregator) syncCounted(ctx context.Context, p *partition, counts []schemas.BucketCount, from int64) {
	b := schemas.BatchID{Partition: p.id, Epoch: p.epoch, Start: from, End: p.flushed}
	a.follow().Batch(ctx, &p.countedEnd, b, counts, a.storedBatches(ctx, p))
}

// countedLast is what the counted topic's Last answered for a partition.
type countedLast struct {
	batch schemas.BatchID
	found bool
}

// lastRead is a counted topic whose Last answer for one partition was read a moment ago (when
// the partition was claimed, for its epoch) and is given again instead of reading the topic's
// tail twice in one assignment. Only this owner publishes the partition's batches, so nothing
// came after it in between.
type lastRead struct {
	counted.Topic
	part int32
	last countedLast
}

func (t lastRead) Last(ctx context.Context, kind schemas.CountKind, part int32) (schemas.BatchID, bool, error) {
	if kind != schemas.CountItems || part != t.part {
		return t.Topic.Last(ctx, kind, part)
	}
	return t.last.batch, t.last.found, nil
}

// catchUpCounted publishes the valid batches of parts, newly assigned, that ClickHouse holds and
// the counted topic lacks: a new owner cannot know what the previous one published. A failure is
// retried at the partition's next flush.
func (a *Aggregator) catchUpCounted(ctx context.Context, parts []*partition) {
	for _, p := range parts {
		topic := a.cfg.Counted
		if p.countedLast != nil {
			topic = lastRead{Topic: topic, part: p.id, last: *p.countedLast}
			p.countedLast = nil
		}
		a.follow().CatchUp(ctx, topic, &p.countedEnd, p.id, p.flushed, a.storedBatches(ctx, p))
	}
}

// storedBatches reads p's valid batches up to its checkpoint.
func (a *Aggregator) storedBatches(ctx context.Context, p *partition) counted.Reader {
	return func(after int64, since time.Time) ([]counted.Stored, error) {
		return a.store.batchSeconds(ctx, p.id, after, p.flushed, since, p.fence.InvalidSQL())
	}
}

// batchSeconds reads partition p's valid batches ending in (after, to] (offsets are whole:
// [after+1, to]), in offset order, with their counts of event-time seconds from since on.
func (s *store) batchSeconds(ctx context.Context, p int32, after, to int64, since time.Time, invalid string) ([]counted.Stored, error) {
	if after >= to {
		return nil, nil
	}
	var c schemas.BucketCount
	var sec time.Time
	// Batches with no counted view have no items but still ended: they need no publish.
	return readBatches(ctx, s, p, after+1, to, invalid, batchRead[counted.Stored]{what: "batch counts",
		cols: "item_id, second, sum(views)", group: "item_id, second", where: fmt.Sprintf(" AND second >= %d", since.Unix()),
		dest:  []any{&c.Key, &sec, &c.Count},
		batch: func(epoch uint64, end int64) counted.Stored { return counted.Stored{Epoch: epoch, End: end} },
		add: func(b *counted.Stored) {
			c.Second = sec.Unix()
			b.Counts = append(b.Counts, c)
		}})
}
