// Package kafka builds the franz-go clients every tally component uses. The same client code
// talks to the embedded broker (devstack/kafkabroker) and to a real cluster; only the seed
// addresses differ. Clients are owned by their caller, who must Close them.
package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"
)

// ClientOptions are the options shared by every tally client: seeds, logging, client metrics.
// reg may be nil (no metrics), e.g. in short-lived tools.
func ClientOptions(brokers []string, clientID string, logger *slog.Logger, reg prometheus.Registerer) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
		kgo.WithLogger(kafkaLogger(logger)),
	}
	if reg != nil {
		m := kprom.NewMetrics("tally_kafka", kprom.Registerer(reg), kprom.WithClientLabel())
		opts = append(opts, kgo.WithHooks(m))
	}
	return opts
}

// Producer is how a client produces.
type Producer struct {
	MaxBuffered     int           // records held at most: past it TryProduce fails at once
	DeliveryTimeout time.Duration // how long a record may wait for its ack
	// Codec compresses the record batches; the zero value is none. ParseCompression turns
	// kafka.compression into one.
	Codec kgo.CompressionCodec
}

// ProducerOptions make a producer that acknowledges a record only once every in-sync replica
// has it (acks=all) and never writes one twice on retry (idempotent; franz-go's default with
// acks=all), within p's bounds.
//
// Batches are compressed with p.Codec (kafka.compression, lz4 by default: it costs no CPU
// measurable on the all-in-one and stores the log in less; docs/PERFORMANCE.md, "Kafka
// settings"). The zero Codec, which tests' own producers use, compresses nothing.
//
// No linger: every caller waits for its records' acks (a 202, a like's answer), so lingering
// adds its whole length to each request, while records produced while a request is in flight
// are batched into the next one anyway.
func ProducerOptions(p Producer) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(p.MaxBuffered),
		kgo.RecordDeliveryTimeout(p.DeliveryTimeout),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(p.Codec),
	}
}

// EnsureTopics creates each topic with the given partition count and automatic durability
// (CreateTopics with the zero Durability and the broker's retention), leaving existing topics
// as they are. It retries until ctx ends so a component can start before its broker.
func EnsureTopics(ctx context.Context, cl *kgo.Client, partitions int32, topics ...string) error {
	specs := make([]TopicSpec, len(topics))
	for i, t := range topics {
		specs[i] = TopicSpec{Name: t, Partitions: partitions}
	}
	return CreateTopics(ctx, cl, Durability{}, specs...)
}

// Partitions returns how many partitions topic has.
func Partitions(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	d, ok := details[topic]
	if !ok || d.Err != nil {
		return 0, fmt.Errorf("describe topic %s: %v", topic, d.Err)
	}
	return len(d.Partitions), nil
}

// kafkaLogger is franz-go's logger (its kslog plugin) over the component's logger. franz-go logs
// every connection and group step at info, which is debug detail here, so its info records are
// demoted to debug on the way (demoted), and every message is prefixed "kafka: ".
func kafkaLogger(l *slog.Logger) kgo.Logger {
	return kslog.New(slog.New(demoted{l.Handler()}))
}

// demoted is a slog.Handler that passes records on one level lower for info, with the "kafka: "
// prefix; the other levels keep theirs.
type demoted struct{ next slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (d demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return d.next.Enabled(ctx, demote(l))
}

func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	r2 := slog.NewRecord(r.Time, demote(r.Level), "kafka: "+r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool { r2.AddAttrs(a); return true })
	return d.next.Handle(ctx, r2)
}

func (d demoted) WithAttrs(as []slog.Attr) slog.Handler { return demoted{d.next.WithAttrs(as)} }
func (d demoted) WithGroup(name string) slog.Handler    { return demoted{d.next.WithGroup(name)} }

// GroupOffsets returns the offsets group has committed on topic's partitions (none committed:
// an empty map).
func GroupOffsets(ctx context.Context, cl *kgo.Client, group, topic string) (map[int32]int64, error) {
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for p, o := range offs[topic] {
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// ParseCompression is the codec kafka.compression names: none, lz4, zstd, snappy or gzip ("" is
// none). Consumers need nothing: Kafka clients decompress what they fetch.
func ParseCompression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "none":
		return kgo.NoCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("compression %q; want none, lz4, zstd, snappy or gzip", name)
}
