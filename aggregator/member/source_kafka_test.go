package member

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

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
