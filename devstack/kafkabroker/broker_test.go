package kafkabroker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
)

// TestEmbeddedRestartKeepsEverything restarts the embedded broker on the same data directory
// and checks that topics, records and a group's committed offsets survived.
func TestEmbeddedRestartKeepsEverything(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	k, err := Start(Options{Dir: dir, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := k.Addr()

	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{addr}, "test", logger, nil), kafka.ProducerOptions(kafka.Producer{MaxBuffered: 1000, DeliveryTimeout: 10 * time.Second})...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := kafka.EnsureTopics(ctx, cl, 3, "t1", "t2"); err != nil {
		t.Fatal(err)
	}
	// EnsureTopics on existing topics is a no-op, not an error.
	if err := kafka.EnsureTopics(ctx, cl, 3, "t1"); err != nil {
		t.Fatalf("second EnsureTopics: %v", err)
	}
	const n = 100
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t1", Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	commit := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) { commit.AddOffset(o.Topic, o.Partition, o.Offset-1, -1) })
	if _, err := adm.CommitOffsets(ctx, "g1", commit); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	k.Close()

	k, err = Start(Options{Dir: dir, Addr: addr})
	if err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	defer k.Close()
	cl, err = kgo.NewClient(append(kafka.ClientOptions([]string{addr}, "test", logger, nil), kgo.ConsumeTopics("t1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm = kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"t1", "t2"} {
		if d, ok := topics[tp]; !ok || len(d.Partitions) != 3 {
			t.Errorf("after restart topic %s: got %v; want 3 partitions", tp, d.Partitions.Numbers())
		}
	}
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume after restart: %v (got %d of %d records)", err, got, n)
		}
		got += fs.NumRecords()
	}
	if got != n {
		t.Errorf("got %d records after restart; want %d", got, n)
	}
	committed, err := adm.FetchOffsets(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if !ok || c.At != o.Offset-1 {
			t.Errorf("partition %d committed offset after restart: got %v; want %d", o.Partition, c.At, o.Offset-1)
		}
	})
}

// Three brokers form one cluster: topics tally creates get 3 replicas and min.insync.replicas 2,
// as on a real cluster, and records produced with acks=all are read back.
func TestThreeBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := Start(Options{Dir: t.TempDir(), Addr: "127.0.0.1:0", Brokers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if got := len(k.Addrs()); got != 3 {
		t.Fatalf("addresses: got %d; want 3", got)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := kgo.NewClient(append(kafka.ClientOptions(k.Addrs()[:1], "test", logger, nil), kafka.ProducerOptions(kafka.Producer{MaxBuffered: 1000, DeliveryTimeout: 10 * time.Second})...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafka.EnsureTopics(ctx, cl, 4, "t"); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]bool{}
	for _, p := range topics["t"].Partitions {
		if len(p.Replicas) != 3 {
			t.Errorf("partition %d: got %d replicas; want 3", p.Partition, len(p.Replicas))
		}
		leaders[p.Leader] = true
	}
	if len(leaders) < 2 {
		t.Errorf("got the partitions led by %d brokers; want them spread", len(leaders))
	}
	configs, err := adm.DescribeTopicConfigs(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := configs.On("t", nil); err != nil || !hasConfig(v.Configs, "min.insync.replicas", "2") {
		t.Errorf("topic configs: got %+v, %v; want min.insync.replicas 2", v.Configs, err)
	}
	const n = 100
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte(fmt.Sprint(i % 7)), Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != n {
		t.Errorf("records in the topic: got %d; want %d", total, n)
	}
}

func hasConfig(cs []kadm.Config, key, value string) bool {
	for _, c := range cs {
		if c.Key == key && c.Value != nil && *c.Value == value {
			return true
		}
	}
	return false
}
