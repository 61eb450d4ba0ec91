// Package counted publishes an aggregator's deduplicated counts to the counted topic
// (schemas/counted.go), once per batch, after the batch is durable: the views path (kind items)
// and the clicks path (kind ads) call Publish with the batch's identity and its (key, second, count)
// pairs, and Last to learn what the topic already holds for a source partition, so a batch that
// became durable but was never published (a crash in between) is published on the next start.
//
// Records go to the counted partition numbered like the source partition (the topic has at
// least as many partitions as the source topic), so one source partition's batches keep their
// order and Last reads only the tail of one partition.
//
// Concurrency: a Publisher is safe for concurrent use; it owns a Kafka client, closed by Close.
package counted

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// Config says where to publish.
type Config struct {
	Brokers []string
	Dial    []kgo.Opt // security options (kafka.Security.Options)
	// Partitions is the source topics' partition count: the counted topic is created with it
	// and must have at least as many.
	Partitions int
	// Durability is the replication a new counted topic gets (config: kafka.replication,
	// kafka.min_insync), like the source topics: topk's input must survive a broker's loss.
	Durability kafka.Durability
	Producer   kafka.Producer // the publisher's bounds and codec
	// Encoding is the record format (kafka.record_format).
	Encoding schemas.Encoding
}

// Topic is what an aggregator needs of the counted topic: a *Publisher, or in tests one that
// fails part-way.
type Topic interface {
	Publish(ctx context.Context, kind schemas.CountKind, b schemas.BatchID, counts []schemas.BucketCount) error
	Last(ctx context.Context, kind schemas.CountKind, part int32) (schemas.BatchID, bool, error)
}

// Publisher writes counted records.
type Publisher struct {
	cfg     Config
	cl      *kgo.Client
	parts   int32 // partitions of the counted topic
	logger  *slog.Logger
	records *prometheus.CounterVec
}

// New connects, creates the counted topic if missing and checks its partition count.
func New(ctx context.Context, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Publisher, error) {
	opts := append(kafka.ClientOptions(cfg.Brokers, "tally-counted", logger, nil), cfg.Dial...)
	opts = append(opts, kafka.ProducerOptions(cfg.Producer)...)
	opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("counted publisher: %w", err)
	}
	if err := kafka.CreateTopics(ctx, cl, cfg.Durability, kafka.TopicSpec{Name: schemas.TopicCounted, Partitions: int32(cfg.Partitions)}); err != nil {
		cl.Close()
		return nil, err
	}
	n, err := kafka.Partitions(ctx, cl, schemas.TopicCounted)
	if err != nil {
		cl.Close()
		return nil, err
	}
	if n < cfg.Partitions {
		cl.Close()
		return nil, fmt.Errorf("topic %s has %d partitions; want at least %d, one per source partition", schemas.TopicCounted, n, cfg.Partitions)
	}
	p := &Publisher{cfg: cfg, cl: cl, parts: int32(n), logger: logger,
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_counted_records_total", Help: "Records published to the counted topic (chunks of deduplicated batches), by kind."}, []string{"kind"})}
	for _, k := range schemas.CountKinds {
		p.records.WithLabelValues(k.String())
	}
	reg.MustRegister(p.records)
	return p, nil
}

// Close flushes nothing (Publish waits for its records) and closes the client.
func (p *Publisher) Close() { p.cl.Close() }

// Publish writes batch b's counts of kind and returns once Kafka acknowledged every chunk. The
// chunks are written in order and each waits for the one before, so a failure leaves a prefix
// of the batch in the topic, which readers complete when the batch is published again.
func (p *Publisher) Publish(ctx context.Context, kind schemas.CountKind, b schemas.BatchID, counts []schemas.BucketCount) error {
	if b.Partition >= p.parts {
		// A source topic grown past the counted topic: the operator adds counted partitions.
		return fmt.Errorf("publish %s batch of partition %d: topic %s has %d partitions; want one per source partition", kind, b.Partition, schemas.TopicCounted, p.parts)
	}
	key := []byte(schemas.CountedKey(kind, b.Partition))
	for _, c := range schemas.CountedRecords(kind, b, counts) {
		r := &kgo.Record{Topic: schemas.TopicCounted, Partition: b.Partition, Key: key, Value: p.cfg.Encoding.AppendCounted(nil, c)}
		if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("publish %s batch of partition %d ending at %d, chunk %d/%d: %w", kind, b.Partition, b.End, c.Chunk+1, c.Chunks, err)
		}
		p.records.WithLabelValues(kind.String()).Inc()
	}
	return nil
}

// Last returns the last batch of kind from source partition part that the topic holds (its
// last chunk may be missing). found is false when the topic holds none.
func (p *Publisher) Last(ctx context.Context, kind schemas.CountKind, part int32) (last schemas.BatchID, found bool, err error) {
	ends, err := kadm.NewClient(p.cl).ListEndOffsets(ctx, schemas.TopicCounted)
	if err != nil {
		return last, false, fmt.Errorf("read end of %s partition %d: %w", schemas.TopicCounted, part, err)
	}
	o, ok := ends.Lookup(schemas.TopicCounted, part)
	if !ok || o.Err != nil {
		return last, false, fmt.Errorf("read end of %s partition %d: %v", schemas.TopicCounted, part, o.Err)
	}
	// Both kinds of one source partition share the counted partition: look back from the end,
	// further each round, until a record of kind shows up.
	for span := int64(64); ; span *= 8 {
		from := max(0, o.Offset-span)
		last, found, err = p.lastIn(ctx, kind, part, from, o.Offset)
		if err != nil || found || from == 0 {
			return last, found, err
		}
	}
}

// lastIn reads [from, end) of counted partition part and returns the last batch of kind.
func (p *Publisher) lastIn(ctx context.Context, kind schemas.CountKind, part int32, from, end int64) (last schemas.BatchID, found bool, err error) {
	if from >= end {
		return last, false, nil
	}
	opts := append(kafka.ClientOptions(p.cfg.Brokers, "tally-counted-tail", p.logger, nil), p.cfg.Dial...)
	opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{schemas.TopicCounted: {part: kgo.NewOffset().At(from)}}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return last, false, fmt.Errorf("read tail of %s partition %d: %w", schemas.TopicCounted, part, err)
	}
	defer cl.Close()
	for next := from; next < end; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return last, false, fmt.Errorf("read tail of %s partition %d: %w", schemas.TopicCounted, part, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return last, false, fmt.Errorf("read tail of %s partition %d: %w", schemas.TopicCounted, part, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if r.Offset >= end {
				return
			}
			c, err := schemas.DecodeCounted(r.Value)
			if err != nil || c.Kind != kind || c.Batch.Partition != part {
				return // not ours; an undecodable record is the reader's to set aside
			}
			last, found = c.Batch, true
		})
	}
	return last, found, nil
}
