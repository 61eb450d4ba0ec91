package counters

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/platform/kafka"
)

// A read that finds its partition's leader gone (an election between reading the layout and
// fetching) follows the leader to its new broker and returns every record.
func TestTailFollowsAMovedLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := kafkabroker.Start(kafkabroker.Options{Dir: t.TempDir(), Addr: "127.0.0.1:0", Brokers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	cl, err := kgo.NewClient(append(kafka.ClientOptions(k.Addrs(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil),
		kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100, DeliveryTimeout: 10 * time.Second})...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafka.EnsureTopics(ctx, cl, 1, "events"); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	tl := tail{cl: cl, topic: "events"}
	l, err := tl.layout(ctx)
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for range 50 { // kfake picks new leaders at random
		k.MoveLeaders()
		if fresh, err := tl.layout(ctx); err == nil && fresh.leaders[0] != l.leaders[0] {
			moved = true
			break
		}
	}
	if !moved {
		t.Fatalf("partition 0 stayed on broker %d through 50 elections", l.leaders[0])
	}
	recs, err := tl.read(ctx, l, 0, 0)
	if err != nil || len(recs) != n {
		t.Fatalf("read with the layout from before the election: got %d records, %v; want %d", len(recs), err, n)
	}
}
