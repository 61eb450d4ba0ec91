package member

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

// assigned is an engine that only records what it was assigned: the member's own logic is
// under test.
type assigned struct{ ids chan []int32 }

func (a assigned) Assign(_ context.Context, ids []int32) (Resume, error) {
	a.ids <- ids
	return Resume{}, nil
}
func (assigned) Process(string, int32, []*kgo.Record)             {}
func (assigned) Reclaims() []int32                                { return nil }
func (assigned) Dropped() []int32                                 { return nil }
func (assigned) FlushDue() bool                                   { return false }
func (assigned) Flush(context.Context) (Offsets, error)           { return nil, nil }
func (assigned) FlushAll(context.Context) (Offsets, error)        { return nil, nil }
func (assigned) Revoke(context.Context, []int32) (Offsets, error) { return nil, nil }
func (assigned) Lost([]int32)                                     {}

// The group can assign partitions, and so call adjustOffsets, before kgo.NewClient has
// returned the client that adjustOffsets asks for the topic's partition count; it waits for it
// instead of using a nil client (a restarted all-in-one panicked so in e2e's kill test).
func TestAdjustOffsetsWaitsForTheClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "member-adjust-test"
	sized := make(chan int, 1)
	eng := assigned{ids: make(chan []int32, 1)}
	s := &Source{c: Config{Stream: "test", Topics: []string{topic}, Partitions: func(n int) { sized <- n }}, engine: eng,
		logger: infra.Logger, clientSet: make(chan struct{}), stop: newStopping()}
	if err := s.halts.init(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	type result struct {
		offsets map[string]map[int32]kgo.Offset
		err     error
	}
	got := make(chan result, 1)
	go func() {
		offs, err := s.adjustOffsets(ctx, map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}})
		got <- result{offs, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("got adjustOffsets returning (%v, %v) before the client was set; want it waiting", r.offsets, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	s.cl = infra.Producer(t, topic, 2)
	close(s.clientSet)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("got %v once the client was set; want the partition assigned", r.err)
		}
	case <-ctx.Done():
		t.Fatal("got no answer from adjustOffsets once the client was set")
	}
	if n := <-sized; n != 2 {
		t.Errorf("got partition count %d; want 2, the topic's", n)
	}
	if ids := <-eng.ids; len(ids) != 1 || ids[0] != 0 {
		t.Errorf("got partitions %v assigned; want [0]", ids)
	}
}

// A partition whose records were all fetched is fetched again from its committed offset by
// refetch (what the Source does with a partition its engine dropped for a newer owner's claim):
// otherwise no record would reach the engine to make it a reclaim.
func TestRefetchDeliversAPartitionAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "member-refetch-test"
	prod := infra.Producer(t, topic, 1)
	for i := range 3 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte{byte('a' + i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{infra.Kafka.Addr()}, "test-refetch", infra.Logger, nil),
		kgo.ConsumerGroup("member-refetch-test"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offsets := func(wait time.Duration) []int64 {
		var got []int64
		pctx, pcancel := context.WithTimeout(ctx, wait)
		defer pcancel()
		for len(got) < 3 && pctx.Err() == nil {
			cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, r.Offset) })
		}
		return got
	}
	if got := offsets(20 * time.Second); len(got) != 3 {
		t.Fatalf("got offsets %v at the first fetch; want 0, 1, 2", got)
	}
	var commitErr error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: 1}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
		})
	if commitErr != nil {
		t.Fatal(commitErr)
	}
	if got := offsets(500 * time.Millisecond); len(got) != 0 {
		t.Fatalf("got offsets %v with every record fetched; want none", got)
	}
	s := &Source{c: Config{Stream: "test", Topics: []string{topic}}, cl: cl, logger: infra.Logger}
	s.refetch([]int32{0, 5}) // 5 is not consumed here: skipped
	if got := offsets(20 * time.Second); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("got offsets %v after refetch; want 1, 2 (from the committed offset)", got)
	}
}
