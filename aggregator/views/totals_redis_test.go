package views

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"tally/platform/redisclient"
	"tally/platform/totals"
	"tally/schemas"
)

// Redis's item totals equal ClickHouse's after each flush, after a crash between the ClickHouse
// write and the Redis apply (the next owner applies the batch once), after Redis lost everything
// (rebuilt from ClickHouse, and readers told to wait until then), and after an outage of Redis
// alone (caught up from ClickHouse at a later flush).
func TestRedisTotalsFollowClickHouse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_totals_test")
	rdb := redisclient.Open(infra.Redis.Addr())
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	const parts = 2
	// Items of partition 0 as the producer's partitioner places them.
	part := kgo.StickyKeyPartitioner(nil).ForTopic(schemas.TopicViews)
	var items []string
	for i := 0; len(items) < 3; i++ {
		id := fmt.Sprintf("tot-%d", i)
		if part.Partition(&kgo.Record{Key: []byte(id)}, parts) == 0 {
			items = append(items, id)
		}
	}
	newAgg := func(r *redis.Client) *Aggregator {
		a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
			MaxBatch: 1000, SketchIdle: time.Minute, Totals: totals.New(r, "views")}, conn, now, infra.Logger, prometheus.NewRegistry())
		a.SetPartitions(parts)
		if _, err := a.Assign(ctx, []int32{0, 1}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	next := int64(0)
	post := func(a *Aggregator, n int) {
		offs := make([]int64, n)
		vals := make([][]byte, n)
		for j := range n {
			offs[j] = next
			vals[j] = view(items[j%len(items)], fmt.Sprintf("v%d", next), clock.UnixMilli())
			next++
		}
		a.Process(0, offs, vals)
		clock = clock.Add(time.Second)
		if _, err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	reader := totals.New(rdb, "views")
	check := func(step string, wantReady bool) {
		t.Helper()
		ch, err := (&store{conn: conn}).itemTotals(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		pipe := rdb.Pipeline()
		res := reader.Queue(ctx, pipe, items)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		views, _, ready, err := res()
		if err != nil {
			t.Fatal(err)
		}
		if ready != wantReady {
			t.Errorf("%s: got ready %v; want %v", step, ready, wantReady)
		}
		for i, it := range items {
			if views[i] != ch[it] {
				t.Errorf("%s: %s: got %d views in redis; want %d as in clickhouse", step, it, views[i], ch[it])
			}
		}
	}

	a := newAgg(rdb)
	post(a, 30)
	check("after a flush", true)

	// The Redis apply fails (as if the process died between the two writes); the next owner
	// applies the batch from ClickHouse, once.
	a.tot = totals.New(down, "views")
	post(a, 30)
	b := newAgg(rdb)
	check("after the next owner caught up", true)
	post(b, 12)
	check("after the next owner's flush", true)

	// Redis comes back empty: readers wait, the owner rebuilds at its next flush.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	post(b, 9)
	check("after a rebuild", true)

	// Redis unreachable for a while: counting in ClickHouse goes on, Redis catches up later.
	b.tot = totals.New(down, "views")
	post(b, 6)
	post(b, 6)
	b.tot = totals.New(rdb, "views")
	clock = clock.Add(time.Second) // the sketch interval passes: idle partitions catch up too
	post(b, 3)
	check("after an outage of redis", true)
}
