// Package kafka builds the franz-go clients every tally component uses and, for the all-in-one
// mode, runs the embedded broker (kfake) on a data directory. The same client code talks to the
// embedded broker and to a real cluster; only the seed addresses differ.
//
// Clients are owned by their caller, who must Close them; the embedded broker is owned by
// whoever called StartEmbedded and stops with Close.
package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// Embedded is an in-process Kafka broker speaking the real protocol, persisted under a directory.
type Embedded struct {
	cluster *kfake.Cluster
	addr    string
}

// StartEmbedded starts one kfake broker listening on addr, persisting records and group offsets
// under dir (they survive a restart on the same dir). syncWrites fsyncs every batch.
func StartEmbedded(dir, addr string, syncWrites bool) (*Embedded, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka port %q: %w", portStr, err)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.DataDir(dir),
		// Real brokers default to a 6 s minimum; one machine can afford faster failover.
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
	}
	if syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka on %s in %s: %w", addr, dir, err)
	}
	return &Embedded{cluster: c, addr: c.ListenAddrs()[0]}, nil
}

// Addr is the broker's host:port.
func (e *Embedded) Addr() string { return e.addr }

// Close stops the broker; what was written stays in its data directory.
func (e *Embedded) Close() { e.cluster.Close() }

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
