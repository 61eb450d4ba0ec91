package testinfra

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
)

// Producer returns a producer on the embedded broker, with the production options (acks=all)
// and topic created with partitions partitions; it is closed when t ends.
func (in *Infra) Producer(t testing.TB, topic string, partitions int32) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{in.Kafka.Addr()}, "test-producer", in.Logger, nil),
		kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100000, DeliveryTimeout: 10 * time.Second})...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, partitions, topic); err != nil {
		t.Fatal(err)
	}
	return cl
}
