package loadgen

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
)

// The sampler starts with the load, often before the aggregator's group exists: a group the
// broker does not know has committed nothing, so every record counts as lag (no error).
func TestLagOfAGroupNotJoinedYet(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, viewsTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: viewsTopic, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	m := newLagMonitor(c.ListenAddrs(), kafka.Security{}, "no-such-group", viewsTopic)
	defer m.close()
	if got, err := m.lag(ctx); err != nil || got != 5 {
		t.Fatalf("got lag %d, %v; want 5, nil", got, err)
	}
}
