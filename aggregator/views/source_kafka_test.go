package views

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"tally/aggregator/member"
	"tally/schemas"
)

// The group can assign partitions, and so call adjustOffsets, before kgo.NewClient has
// returned the client that adjustOffsets asks for the views topic's partition count; it waits
// for it instead of using a nil client (a restarted all-in-one panicked so in e2e's kill test).
func TestAdjustOffsetsWaitsForTheClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_adjust_test")
	agg := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
		MaxBatch: 1000, SketchIdle: time.Minute}, conn, time.Now, infra.Logger, prometheus.NewRegistry())
	s := &Source{agg: agg, logger: infra.Logger, clientSet: make(chan struct{})}
	s.running, s.cancel = context.WithCancel(context.Background())
	defer s.cancel()
	s.stop = member.New()
	type result struct {
		offsets map[string]map[int32]kgo.Offset
		err     error
	}
	got := make(chan result, 1)
	go func() {
		offs, err := s.adjustOffsets(ctx, map[string]map[int32]kgo.Offset{schemas.TopicViews: {0: kgo.NewOffset().AtStart()}})
		got <- result{offs, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("got adjustOffsets returning (%v, %v) before the client was set; want it waiting", r.offsets, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	s.cl = infra.Producer(t, schemas.TopicViews, 2)
	close(s.clientSet)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("got %v once the client was set; want the partition assigned", r.err)
		}
	case <-ctx.Done():
		t.Fatal("got no answer from adjustOffsets once the client was set")
	}
	if n := agg.partitionCount(); n != 2 {
		t.Errorf("got partition count %d; want 2, the views topic's", n)
	}
}
