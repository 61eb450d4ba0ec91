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
)

// ClientOptions are the options shared by every tally client: seeds, logging, client metrics.
// reg may be nil (no metrics), e.g. in short-lived tools.
func ClientOptions(brokers []string, clientID string, logger *slog.Logger, reg prometheus.Registerer) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID(clientID),
		kgo.WithLogger(slogAdapter{logger}),
	}
	if reg != nil {
		m := kprom.NewMetrics("tally_kafka", kprom.Registerer(reg), kprom.WithClientLabel())
		opts = append(opts, kgo.WithHooks(m))
	}
	return opts
}

// ProducerOptions make a producer that acknowledges a record only once every in-sync replica
// has it (acks=all) and never writes one twice on retry (idempotent; franz-go's default with
// acks=all). maxBuffered bounds memory: past it TryProduce fails at once instead of queueing.
//
// No linger: every caller waits for its records' acks (a 202, a like's answer), so lingering
// adds its whole length to each request, while records produced while a request is in flight
// are batched into the next one anyway.
func ProducerOptions(maxBuffered int, deliveryTimeout time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(maxBuffered),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
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

// slogAdapter lets franz-go log through the component's slog logger; franz-go's debug chatter
// is kept at debug level.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case a.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case a.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case a.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (a slogAdapter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		// franz-go logs every connection and group step at info; that is debug detail here.
		l = slog.LevelDebug
	default:
		l = slog.LevelDebug
	}
	a.l.Log(context.Background(), l, "kafka: "+msg, keyvals...)
}
