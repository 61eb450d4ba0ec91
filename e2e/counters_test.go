package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tallypipeline/tally/client"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestCountersLoggedExactThroughKills is the promise of the logged modes as a client outside the
// project sees it: adds sent with the Go client (each retried with its token until acknowledged,
// every tenth sent twice more by the caller, as a retrying producer does) while the all-in-one
// is SIGKILLed three times and started again end with every eventual counter exactly the sum of
// the adds, each counted once, and a clear sent half-way applied at its place in the log; every
// add to an accurate counter answers, at once, exactly the sum of its adds so far.
func TestCountersLoggedExactThroughKills(t *testing.T) {
	t.Parallel() // asserts the end state alone (doc.go)
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
	faultsOver := make(chan struct{})
	c, sent, done, want := goSendCounterAdds(t, ctx, api, 300, faultsOver)
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
	close(faultsOver)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitCountersExact(t, ctx, c, *want, nil)
	recountAgrees(t, bins.batchjob, dir)
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
	if sum != (*want)["c1"] || len(series.Points) != 3 {
		t.Errorf("got %d hourly points summing to %d; want 3 summing to %d", len(series.Points), sum, (*want)["c1"])
	}
}

// recountAgrees runs the nightly recount of today (UTC) from the log, for every logged namespace,
// against the embedded stack on dir: it must find the stream's counts exact in both (meters and
// exact).
func recountAgrees(t *testing.T, batchjob, dir string) {
	t.Helper()
	cmd := exec.Command(batchjob, "counters", "--date", time.Now().UTC().Format(time.DateOnly))
	cmd.Env = os.Environ()
	for k, v := range infraEnv(t, dir) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	var summaries []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "counter report ") {
			summaries = append(summaries, l)
		}
	}
	if err != nil || len(summaries) != 2 || strings.Count(string(out), " 0 differ from the stream") != 2 {
		t.Fatalf("batchjob counters: got %v and\n%s\nwant two namespaces, no counter differing", err, out)
	}
	t.Logf("batchjob counters:\n%s", strings.Join(summaries, "\n"))
}

// goSendCounterAdds starts sendCounterAdds against the collector at api with a client that
// retries (keeping its tokens) for as long as kills take; done receives its error, and want
// holds the eventual counters' totals once it did.
func goSendCounterAdds(t *testing.T, ctx context.Context, api string, n int, faultsOver <-chan struct{}) (*client.Client, *atomic.Int64, chan error, *map[string]int64) {
	t.Helper()
	c, err := client.New(client.Options{BaseURL: api, MaxAttempts: 200, RetryBase: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sent, done, want := &atomic.Int64{}, make(chan error, 1), new(map[string]int64)
	go func() {
		var err error
		*want, err = sendCounterAdds(ctx, c, n, faultsOver, sent)
		done <- err
	}()
	return c, sent, done, want
}

// counterNames is how many eventual counters sendCounterAdds spreads its adds over.
const counterNames = 5

// addsAfterFaults is how many adds sendCounterAdds sends once the test's faults are over: the
// system that went through them must go on counting, and no longer.
const addsAfterFaults = 50

// sendCounterAdds creates namespaces meters (eventual) and exact (accurate) and sends adds over
// counterNames eventual counters with the client's retries: n at the least, and on until
// faultsOver is closed, then addsAfterFaults more, so that every fault meets adds in flight and
// the load does not outlast the faults by more. Every tenth add is sent twice more, c4 is cleared
// after n/2, and every third add also goes to an accurate counter (addExact, checked at once).
// It counts the adds sent in sent and returns what each eventual counter must end at.
func sendCounterAdds(ctx context.Context, c *client.Client, n int, faultsOver <-chan struct{}, sent *atomic.Int64) (map[string]int64, error) {
	for ns, mode := range map[string]client.CounterMode{"meters": client.ModeEventual, "exact": client.ModeAccurate} {
		if _, err := c.PutNamespace(ctx, ns, client.NamespaceSpec{Mode: mode, IdempotencyWindow: "1h"}); err != nil {
			return nil, err
		}
	}
	want, wantExact := map[string]int64{}, map[string]int64{}
	end := -1 // the last add's index + 1, once n are sent and the faults are over
	for i := 0; end < 0 || i < end; i++ {
		if end < 0 && i >= n {
			select {
			case <-faultsOver:
				end = i + addsAfterFaults
			default:
			}
		}
		if i == n/2 { // c4 cleared half-way: it ends with the adds sent after
			if _, err := c.ClearCount(ctx, "meters", "c4", "clear-1"); err != nil {
				return nil, fmt.Errorf("clear: %w", err)
			}
			want["c4"] = 0
		}
		name, delta := fmt.Sprintf("c%d", i%counterNames), int64(i%7-2)
		a := client.CounterAdd{Delta: delta, Token: fmt.Sprintf("add-%d", i)}
		for range 1 + 2*btoi(i%10 == 0) {
			if _, err := c.AddCount(ctx, "meters", name, a); err != nil {
				return nil, fmt.Errorf("add %d: %w", i, err)
			}
		}
		want[name] += delta
		if i%3 == 0 {
			if err := addExact(ctx, c, i, wantExact); err != nil {
				return nil, err
			}
		}
		sent.Add(1)
	}
	return want, nil
}

// waitCountersExact waits until every eventual counter of meters reads want. When they do not,
// and explain is set, the failure says where the adds went (explainCounters).
func waitCountersExact(t *testing.T, ctx context.Context, c *client.Client, want map[string]int64, explain func() string) {
	t.Helper()
	names := make([]string, counterNames)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	var why string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got, err := c.GetCounts(ctx, "meters", names...)
		if err != nil {
			why = err.Error()
			continue
		}
		ok := len(got) == counterNames
		for _, g := range got {
			ok = ok && g.Count == want[g.Name]
		}
		if ok {
			return
		}
		why = fmt.Sprintf("got %v; want %v", got, want)
	}
	if explain != nil {
		why += "\n" + explain()
	}
	t.Fatalf("every add counted once: not reached within 1m0s: %s", why)
}

// TestCountersExactThroughAggregatorKills sends the same adds to separate processes (the
// infrastructure, a collector, two aggregators) while a random aggregator is SIGKILLed every
// 0.5 to 2 s and restarted, eight times, and the infrastructure process (Kafka, ClickHouse,
// Redis) once: every accurate add-and-get answers the exact sum at once, also while no
// aggregator counts, and the eventual counters end exact.
func TestCountersExactThroughAggregatorKills(t *testing.T) {
	t.Parallel() // asserts the end state alone (doc.go)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := startCluster(t, 2)
	faultsOver := make(chan struct{})
	c, sent, done, want := goSendCounterAdds(t, ctx, cl.api, 400, faultsOver)
	rng := rand.New(rand.NewPCG(7, 7))
	aggKills, infraKills := 0, 0
	for aggKills < 8 || infraKills == 0 {
		select {
		case err := <-done:
			t.Fatalf("counter adds ended during the faults: %v", err)
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
		}
		p := cl.aggs[rng.IntN(len(cl.aggs))]
		if aggKills == 3 && infraKills == 0 {
			p = cl.infra
			infraKills++
		} else {
			aggKills++
		}
		_ = p.stop(syscall.SIGKILL, 10*time.Second)
		t.Logf("%s killed after %d adds", p.name, sent.Load())
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		if err := p.start(); err != nil {
			t.Fatalf("restart %s: %v", p.name, err)
		}
	}
	close(faultsOver) // the adds finish on a quiet cluster
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitCountersExact(t, ctx, c, *want, nil)
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
