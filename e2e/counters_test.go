package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tally/client"
	"tally/testsupport/testinfra"
)

// TestCountersLoggedExactThroughKills is the promise of the logged modes as a client outside the
// project sees it: adds sent with the Go client (each retried with its token until acknowledged,
// every tenth sent twice more by the caller, as a retrying producer does) while the all-in-one
// is SIGKILLed three times and started again end with every eventual counter exactly the sum of
// the adds, each counted once, and a clear sent half-way applied at its place in the log; every
// add to an accurate counter answers, at once, exactly the sum of its adds so far.
func TestCountersLoggedExactThroughKills(t *testing.T) {
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	kafkaAddr, chAddr, apiAddr, aggAddr := testinfra.MustFreeAddr(t), testinfra.MustFreeAddr(t), testinfra.MustFreeAddr(t), testinfra.MustFreeAddr(t)
	_, redisPort, _ := strings.Cut(testinfra.MustFreeAddr(t), ":")
	all := startProc(t, "all-in-one", bins.pipeline, dir, "run", "--data_dir", dir, "--demo.enabled=false", "--kafka.partitions", "4",
		"--embedded.kafka_addr", kafkaAddr, "--embedded.clickhouse_addr", chAddr, "--embedded.redis_port", redisPort,
		"--collector.addr", apiAddr, "--aggregator.addr", aggAddr, "--aggregator.flush_interval", "200ms")
	api := "http://" + apiAddr
	testinfra.WaitHTTP(t, time.Minute, api+"/readyz")
	c, err := client.New(client.Options{BaseURL: api, MaxAttempts: 200, RetryBase: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutNamespace(ctx, "meters", client.NamespaceSpec{Mode: client.ModeEventual, IdempotencyWindow: "1h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutNamespace(ctx, "exact", client.NamespaceSpec{Mode: client.ModeAccurate, IdempotencyWindow: "1h"}); err != nil {
		t.Fatal(err)
	}
	const adds, counters = 3000, 5
	want, wantExact := map[string]int64{}, map[string]int64{}
	var sent atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range adds {
			if i == adds/2 { // c4 cleared half-way: it ends with the adds sent after
				if _, err := c.ClearCount(ctx, "meters", "c4", "clear-1"); err != nil {
					done <- fmt.Errorf("clear: %w", err)
					return
				}
				want["c4"] = 0
			}
			name, delta := fmt.Sprintf("c%d", i%counters), int64(i%7-2)
			a := client.CounterAdd{Delta: delta, Token: fmt.Sprintf("add-%d", i)}
			for range 1 + 2*btoi(i%10 == 0) {
				if _, err := c.AddCount(ctx, "meters", name, a); err != nil {
					done <- fmt.Errorf("add %d: %w", i, err)
					return
				}
			}
			want[name] += delta
			if i%3 == 0 {
				if err := addExact(ctx, c, i, wantExact); err != nil {
					done <- err
					return
				}
			}
			sent.Add(1)
		}
		done <- nil
	}()
	rng := rand.New(rand.NewPCG(5, 5))
	for kills := 0; kills < 3; kills++ {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		_ = all.stop(syscall.SIGKILL, 10*time.Second)
		t.Logf("all-in-one killed after %d adds", sent.Load())
		if err := all.start(); err != nil {
			t.Fatalf("restart the all-in-one: %v", err)
		}
		testinfra.WaitHTTP(t, time.Minute, api+"/readyz")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	names := make([]string, counters)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	testinfra.WaitFor(t, time.Minute, "every add counted once", func() (bool, string) {
		got, err := c.GetCounts(ctx, "meters", names...)
		if err != nil {
			return false, err.Error()
		}
		ok := len(got) == counters
		for _, g := range got {
			ok = ok && g.Count == want[g.Name]
		}
		return ok, fmt.Sprintf("got %v; want %v", got, want)
	})
	// Distinct members through the log, each sent twice: counted once each.
	for i := range 30 {
		for range 2 {
			if err := c.AddDistinct(ctx, "meters", "c1", fmt.Sprintf("viewer-%d", i), time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testinfra.WaitFor(t, 30*time.Second, "30 distinct members counted", func() (bool, string) {
		d, err := c.GetDistinct(ctx, "meters", "c1", time.Time{}, time.Time{})
		if err != nil {
			return false, err.Error()
		}
		return d.Distinct == 30, fmt.Sprintf("got %+v", d)
	})
	// The same adds by the hour of their event time (the collector's clock): the buckets sum to
	// the total.
	series, err := c.GetCountSeries(ctx, "meters", "c1", client.SeriesQuery{Granularity: client.Hour, From: time.Now().Add(-2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, p := range series.Points {
		sum += p.Count
	}
	if sum != want["c1"] || len(series.Points) != 3 {
		t.Errorf("got %d hourly points summing to %d; want 3 summing to %d", len(series.Points), sum, want["c1"])
	}
}

// addExact sends add i to an accurate counter, every tenth three times, and checks that each
// answer is exactly the sum of the counter's adds so far, kept in want.
func addExact(ctx context.Context, c *client.Client, i int, want map[string]int64) error {
	name, delta := fmt.Sprintf("e%d", i%2), int64(i%5+1)
	want[name] += delta
	for range 1 + 2*btoi(i%10 == 0) {
		got, err := c.AddAndGetCount(ctx, "exact", name, client.CounterAdd{Delta: delta, Token: fmt.Sprintf("exact-%d", i)})
		if err != nil {
			return fmt.Errorf("accurate add %d: %w", i, err)
		}
		if got.Count != want[name] {
			return fmt.Errorf("accurate add %d to %s: got count %d; want %d", i, name, got.Count, want[name])
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
