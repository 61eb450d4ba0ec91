package testinfra

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// CountedEnds returns the counted topic's end offsets by partition. A test that reads the topic
// from them (AppliedCounted) sees only what was published since, also when it runs again in the
// same process, whose broker keeps the topic.
func (in *Infra) CountedEnds(t testing.TB, ctx context.Context) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kafka.ClientOptions([]string{in.Kafka.Addr()}, "test-counted-ends", in.Logger, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kafka.PartitionOffsets(schemas.TopicCounted, "end", func() (kadm.ListedOffsets, error) {
		return kadm.NewClient(cl).ListEndOffsets(ctx, schemas.TopicCounted)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ends
}

// AppliedCounted reads the counted topic from the offsets in from (a partition missing from it,
// or a nil from, from its start) to its end, and returns the records topk's guard rule
// applies, in log order per partition: a chunk counts iff its (epoch, end, chunk) comes after
// the last one applied from its (kind, source partition). Records that do not decode are
// skipped. It fails t if two records of one chunk identity carry different counts: a batch
// published again must be cut into the same chunks, or a reader would mix two cuts.
func (in *Infra) AppliedCounted(t testing.TB, ctx context.Context, from map[int32]int64) []schemas.Counted {
	t.Helper()
	ends := in.CountedEnds(t, ctx)
	starts := map[int32]kgo.Offset{}
	seen := map[int32]int64{}
	for p := range ends {
		starts[p] = kgo.NewOffset().At(from[p])
		seen[p] = from[p]
	}
	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{in.Kafka.Addr()}, "test-counted-reader", in.Logger, nil),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{schemas.TopicCounted: starts}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type source struct {
		kind schemas.CountKind
		part int32
	}
	type chunk struct {
		src   source
		epoch uint64
		end   int64
		chunk uint32
	}
	guards := map[source]chunk{}
	bodies := map[chunk][]schemas.BucketCount{}
	var out []schemas.Counted
	for {
		done := true
		for p, end := range ends {
			if seen[p] < end {
				done = false
			}
		}
		if done {
			return out
		}
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read the counted topic: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[r.Partition] = r.Offset + 1
			c, err := schemas.DecodeCounted(r.Value)
			if err != nil {
				return
			}
			src := source{c.Kind, c.Batch.Partition}
			id := chunk{src, c.Batch.Epoch, c.Batch.End, c.Chunk}
			if prev, ok := bodies[id]; ok && !slices.Equal(prev, c.Counts) {
				t.Errorf("counted %s batch of partition %d (epoch %d, end %d) chunk %d published twice with different counts", c.Kind, c.Batch.Partition, c.Batch.Epoch, c.Batch.End, c.Chunk)
			}
			bodies[id] = c.Counts
			g, ok := guards[src]
			if ok && !(c.Batch.Epoch > g.epoch || c.Batch.Epoch == g.epoch && (c.Batch.End > g.end || c.Batch.End == g.end && c.Chunk > g.chunk)) {
				return
			}
			guards[src] = id
			out = append(out, c)
		})
	}
}
