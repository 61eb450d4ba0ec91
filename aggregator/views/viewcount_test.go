package views

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/schemas"
)

func viewCount(item string, second int64, count uint64, source string, seq uint64) []byte {
	return schemas.AppendViewCount(nil, schemas.ViewCount{ItemID: item, Second: second, Count: count, SourceID: source, Seq: seq})
}

// Edge servers' view counts are counted once per (source, seq): retries in one batch, in a later
// batch, after a restart from the checkpoint and in a replay after a crash before the flush add
// nothing; each counted one adds its count to view_deltas, every rollup and Redis's item totals,
// beside ordinary views of the same items, and none touches the unique-viewer sketches.
func TestEdgeViewCountsCountOncePerSourceAndSeq(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_edge_test")
	rdb := redisclient.Open(infra.Redis.Addr())
	defer rdb.Close()
	// Totals of their own name: other tests of the package share the Redis server.
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	const parts = 2
	part := kgo.StickyKeyPartitioner(nil).ForTopic(schemas.TopicViews)
	var items []string
	for i := 0; len(items) < 2; i++ {
		id := fmt.Sprintf("edge-%d", i)
		if part.Partition(&kgo.Record{Key: []byte(id)}, parts) == 0 {
			items = append(items, id)
		}
	}
	a, b := items[0], items[1]
	sec := clock.Unix() - 60
	newAgg := func() *Aggregator {
		agg := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
			MaxBatch: 1000, SketchIdle: time.Minute, Totals: totals.New(rdb, "edgeviews")}, conn, now, infra.Logger, prometheus.NewRegistry())
		agg.SetPartitions(parts)
		return agg
	}
	next := int64(0)
	process := func(agg *Aggregator, values ...[]byte) {
		offs := make([]int64, len(values))
		for i := range values {
			offs[i] = next
			next++
		}
		processAt(agg, 0, offs, values)
	}
	flush := func(agg *Aggregator) {
		clock = clock.Add(time.Second)
		if _, err := flushViews(agg, ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, want map[string]int64) {
		t.Helper()
		for _, it := range items {
			checkRollups(t, ctx, conn, it, want[it])
		}
		views := redisViews(t, ctx, rdb, "edgeviews", items)
		for i, it := range items {
			if views[i] != want[it] {
				t.Errorf("%s: %s: got %d views in redis; want %d", step, it, views[i], want[it])
			}
		}
	}

	first := newAgg()
	if _, err := assignViews(first, ctx, []int32{0, 1}); err != nil {
		t.Fatal(err)
	}
	bad := viewCount(a, sec, 1, "e/1", 99) // a source id CheckID rejects: set aside, never counted
	process(first,
		viewCount(a, sec, 100, "e1", 1),
		viewCount(a, sec, 100, "e1", 1), // retry in the same batch
		viewCount(a, sec, 50, "e1", 2),
		viewCount(b, sec, 7, "e2", 1), // same seq, another source: counts
		view(a, "viewer-1", sec*1000+500),
		view(a, "viewer-1", sec*1000+900), // the viewer rule still holds beside counts
		viewCount(a, sec, 100, "e1", 1),   // another retry
		bad,
	)
	flush(first)
	check("after the first batch", map[string]int64{a: 151, b: 7})

	process(first,
		viewCount(a, sec, 50, "e1", 2), // retry of a counted record of an earlier batch
		viewCount(a, sec+1, 10, "e1", 3),
	)
	flush(first)
	check("after a retry in a later batch", map[string]int64{a: 161, b: 7})

	// A restart resumes at the checkpoint with the dedupe state restored from ClickHouse.
	second := newAgg()
	resume, err := assignViews(second, ctx, []int32{0, 1})
	if err != nil || resume[0] != next {
		t.Fatalf("got resume %v, %v; want partition 0 at %d", resume, err, next)
	}
	replayFrom := next
	batch3 := [][]byte{
		viewCount(a, sec, 100, "e1", 1), // retried after the restart
		viewCount(b, sec, 7, "e2", 1),
		viewCount(b, sec+2, 3, "e2", 2),
	}
	process(second, batch3...)
	// second dies before its flush; the next owner replays the batch from the checkpoint.
	third := newAgg()
	if resume, err := assignViews(third, ctx, []int32{0, 1}); err != nil || resume[0] != replayFrom {
		t.Fatalf("got resume %v, %v; want partition 0 at %d", resume, err, replayFrom)
	}
	next = replayFrom
	process(third, batch3...)
	process(third, viewCount(b, sec+2, 3, "e2", 2)) // and retried once more
	flush(third)
	check("after a restart and a replay", map[string]int64{a: 161, b: 10})

	var sketches uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM unique_viewers WHERE item_id = ?", b).Scan(&sketches); err != nil {
		t.Fatal(err)
	}
	if sketches != 0 {
		t.Errorf("got %d unique-viewer sketch rows of %s; want 0 (view counts name no viewer)", sketches, b)
	}
	var dead uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM dead_letters WHERE source = 'views'").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 1 {
		t.Errorf("got %d dead letters; want 1 (the bad view count)", dead)
	}
}
