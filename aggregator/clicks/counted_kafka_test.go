package clicks

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	countedtopic "github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/aggregator/counted/countedtest"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// The counted topic, read with topk's rule, holds exactly the clicks the click-id rule counts
// (the oracle's, per ad and event-time second) up to each owner's checkpoint: after plain
// flushes, after a crash between the durable write and the publish (the next owner publishes
// the batches from ClickHouse), after a publish cut short after its first chunk (published
// again whole, in the same chunks), and after a crash between a batch's facts and its deltas.
func TestCountedTopicHoldsTheDeduplicatedClicks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const part = 1
	conn := openMigrated(t, ctx, "clicks_counted_topic")
	start := infra.CountedEnds(t, ctx) // what an earlier run in this process published stays out
	pub, err := countedtopic.New(ctx, countedtopic.Config{Brokers: []string{infra.Kafka.Addr()}, Partitions: 2, Producer: kafka.Producer{MaxBuffered: 10000, DeliveryTimeout: 10 * time.Second}},
		infra.Logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	rng := rand.New(rand.NewPCG(7, 7))
	var log []event
	var ids []string
	random := func(n int, from time.Duration) {
		for i := range n {
			at := from + time.Duration(i)*5*time.Second + time.Duration(rng.IntN(60))*time.Second
			if rng.IntN(5) == 0 && len(ids) > 0 {
				log = append(log, vrd("ad0", ids[rng.IntN(len(ids))], schemas.VerdictFraud, at+time.Hour))
				continue
			}
			id := fmt.Sprintf("k%d-%d", from, i)
			if rng.IntN(3) == 0 && len(ids) > 0 {
				id = ids[rng.IntN(len(ids))] // a double tap inside 10 minutes, or a repeat outside
			}
			ids = append(ids, id)
			log = append(log, clk(fmt.Sprintf("ad%d", rng.IntN(4)), id, at, -1))
		}
	}
	random(300, 0)
	n1 := len(newFeeder(log).clicks)
	// One batch of more distinct (ad, second) pairs than a chunk holds.
	for i := range schemas.MaxCountedChunk + 100 {
		log = append(log, clk("big", fmt.Sprintf("b%d", i), 40*time.Minute+time.Duration(i)*time.Second, -1))
	}
	random(300, 3*time.Hour)
	f := newFeeder(log)
	var clickLog []event
	for _, e := range log {
		if e.click != nil {
			clickLog = append(clickLog, e)
		}
	}

	now := func() time.Time { return base.Add(5 * time.Hour) }
	check := func(step string, at offsets) {
		t.Helper()
		want := map[string]uint64{}
		counted, _ := oracleCounted(clickLog[:at.clicks], testCfg.Window, testCfg.Grace, testCfg.FraudThreshold)
		for _, cs := range counted {
			for _, c := range cs {
				want[fmt.Sprint(c.ad, "@", schemas.FloorDiv(c.ts, 1000))]++
			}
		}
		got := map[string]uint64{}
		for _, c := range infra.AppliedCounted(t, ctx, start) {
			if c.Kind != schemas.CountAds || c.Batch.Partition != part {
				continue
			}
			for _, e := range c.Counts {
				got[fmt.Sprint(e.Key, "@", e.Second)] += e.Count
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: the counted topic holds %d (ad, second) counts summing to %d; the oracle up to click %d has %d summing to %d",
				step, len(got), sum(got), at.clicks, len(want), sum(want))
		}
	}
	assign := func() (*Aggregator, offsets) {
		cfg := testCfg
		cfg.Counted = pub
		cfg.MaxBatch = 100000
		a := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
		res, err := a.Assign(ctx, []int32{part})
		if err != nil {
			t.Fatal(err)
		}
		return a, resumeAt(res, part)
	}
	v1 := 0
	for _, e := range log[:len(log)-300] {
		if e.verdict != nil {
			v1++
		}
	}

	a, at := assign()
	f.play(t, ctx, a, part, at, n1/2, v1/2, rng, 1+rng.IntN(30))
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("plain flushes", offsets{held(a, part).flushed.clicks, 0})
	a.cfg.Counted = nil // the process dies after the durable writes, before the publishes
	f.play(t, ctx, a, part, held(a, part).flushed, n1, v1, rng, 1+rng.IntN(30))
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	a, at = assign()
	check("crash before the publishes", at)
	a.cfg.Counted = countedtest.FailAfterFirstChunk{Topic: pub}
	big := n1 + schemas.MaxCountedChunk + 100
	a.Process(schemas.TopicClicks, part, records(schemas.TopicClicks, part, n1, f.clicks[n1:big]))
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	a, at = assign()
	if at.clicks != int64(big) {
		t.Fatalf("after the big batch: got checkpoint %d; want %d", at.clicks, big)
	}
	check("publish cut short", at)
	f.play(t, ctx, a, part, at, big+(len(f.clicks)-big)/2, len(f.verdicts), rng, 1+rng.IntN(30))
	// Crash between a batch's facts and its deltas: its clicks are replayed, and published once.
	if err := a.store.writeFacts(ctx, []*partition{held(a, part)}); err != nil {
		t.Fatal(err)
	}

	a, at = assign()
	check("crash between facts and deltas", at)
	f.play(t, ctx, a, part, at, len(f.clicks), len(f.verdicts), rng, 1+rng.IntN(30))
	if _, err := a.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	check("the whole log", offsets{int64(len(f.clicks)), 0})
}

func sum(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

// Two identical clicks (same id, ad and time) both count when they arrive more than window +
// grace behind the newest click. When the process dies after the batch's durable write and
// before its publish, the next owner publishes the batch from ClickHouse: with both clicks, as
// the minute deltas have them.
func TestCatchUpPublishesIdenticalClicksBoth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const part = 0
	conn := openMigrated(t, ctx, "clicks_identical_catch_up")
	start := infra.CountedEnds(t, ctx)
	pub, err := countedtopic.New(ctx, countedtopic.Config{Brokers: []string{infra.Kafka.Addr()}, Partitions: 2, Producer: kafka.Producer{MaxBuffered: 100, DeliveryTimeout: 10 * time.Second}},
		infra.Logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	f := newFeeder([]event{clk("twin-newest", "n", 30*time.Minute, -1), clk("twin-ad", "twin", 0, -1), clk("twin-ad", "twin", 0, -1)})
	now := func() time.Time { return base.Add(time.Hour) }
	cfg := testCfg // no counted topic: the process dies before it publishes
	a := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
	if _, err := a.Assign(ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	a.Process(schemas.TopicClicks, part, records(schemas.TopicClicks, part, 0, f.clicks))
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Counted = pub
	if _, err := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry()).Assign(ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	var got uint64
	for _, c := range infra.AppliedCounted(t, ctx, start) {
		for _, e := range c.Counts {
			if c.Kind == schemas.CountAds && e.Key == "twin-ad" {
				got += e.Count
			}
		}
	}
	if got != 2 {
		t.Errorf("got %d clicks of twin-ad published by the catch-up; want 2 (both counted)", got)
	}
}
