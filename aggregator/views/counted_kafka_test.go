package views

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/aggregator/counted/countedtest"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// The counted topic, read with topk's rule (a chunk counts iff it comes after the last one
// applied from its source partition), holds exactly ClickHouse's deltas: after plain flushes,
// after a crash between the durable write and the publish (the next owner publishes the batch),
// and after a publish cut short after its first chunk (published again whole; the reader skips
// the chunk it has).
func TestCountedTopicFollowsClickHouse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_counted_test")
	start := infra.CountedEnds(t, ctx) // what an earlier run in this process published stays out
	pub, err := counted.New(ctx, counted.Config{Brokers: []string{infra.Kafka.Addr()}, Partitions: 2, Producer: kafka.Producer{MaxBuffered: 10000, DeliveryTimeout: 10 * time.Second}}, infra.Logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	newAgg := func() *Aggregator {
		a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
			MaxBatch: 100000, SketchIdle: time.Minute, Counted: pub}, conn, now, infra.Logger, prometheus.NewRegistry())
		a.SetPartitions(2)
		if _, err := assignViews(a, ctx, []int32{0, 1}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	next := int64(0)
	post := func(a *Aggregator, items int) {
		offs := make([]int64, items)
		vals := make([][]byte, items)
		for j := range items {
			offs[j] = next
			vals[j] = view(fmt.Sprintf("c-%d", j), fmt.Sprintf("v%d", next), clock.UnixMilli()-int64(j%3)*1000)
			next++
		}
		processAt(a, 0, offs, vals)
		clock = clock.Add(time.Second)
		if _, err := flushViews(a, ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string) {
		t.Helper()
		want := map[string]uint64{}
		rows, err := conn.Query(ctx, `SELECT item_id, toInt64(toUnixTimestamp(second)), sum(views) FROM views_by_second GROUP BY item_id, second`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var item string
			var sec int64
			var n uint64
			if err := rows.Scan(&item, &sec, &n); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprint(item, "@", sec)] = n
		}
		rows.Close()
		got := readCounted(t, ctx, start)
		if !maps.Equal(got, want) {
			t.Fatalf("%s: the counted topic holds %d (item, second) counts summing to %d; ClickHouse %d summing to %d", step, len(got), sum(got), len(want), sum(want))
		}
	}

	a := newAgg()
	post(a, 10)
	post(a, 20)
	check("plain flushes")

	a.cfg.Counted = nil // the process dies after the durable write, before the publish
	post(a, 15)
	a = newAgg()
	check("crash before the publish")

	a.cfg.Counted = countedtest.FailAfterFirstChunk{Topic: pub}
	post(a, schemas.MaxCountedChunk+50) // two chunks; the second never leaves
	a.cfg.Counted = nil
	a = newAgg()
	check("publish cut short")

	post(a, 5)
	check("after the catch-up")
}

func sum(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

// readCounted reads the counted topic from offsets from and applies it with topk's guard rule.
func readCounted(t *testing.T, ctx context.Context, from map[int32]int64) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, c := range infra.AppliedCounted(t, ctx, from) {
		if c.Kind != schemas.CountItems {
			continue
		}
		for _, e := range c.Counts {
			out[fmt.Sprint(e.Key, "@", e.Second)] += e.Count
		}
	}
	return out
}
