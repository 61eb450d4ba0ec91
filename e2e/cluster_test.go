package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// TestClusterStaysExact runs the pipeline as a cluster of processes: three Kafka brokers (in the
// infra process; the topics get 3 replicas and min.insync.replicas 2), two collectors, three
// aggregators, and Redis in each topology tally supports beside one server: a primary and a
// replica watched by three Sentinels, and a Redis Cluster of three primaries with a replica
// each. Views are posted through both collectors (the second sends the first's events again:
// retries through another collector), and meanwhile every partition leader moves (twice), an
// aggregator is SIGKILLed for good and a fourth joins (the test waits until its partitions have
// moved), a broker is removed for good (the group coordinators move with it), Redis primaries
// are SIGKILLed (the Sentinel-watched one; in the Cluster, the one serving the view totals and
// then the one serving the like state, each replaced by its replica) and a collector is
// SIGKILLed and started again, while counter adds go through that collector with the client's
// retries (every accurate add-and-get must answer the exact sum at once), like changes go
// through both collectors in turn and clicks through the other. Then Redis loses all its data
// (FLUSHALL on every primary) and the test waits until the view totals are rebuilt from
// ClickHouse and the like state from the log. Afterwards every (item, second) total, rollup
// bucket and item total the API answers (from Redis) equals the oracle computed from the log,
// every eventual counter holds exactly its adds, the likes log ends in the state of the last
// acknowledged change of every pair and the API answers that state, every (ad, minute) click
// count equals the log's, and the test prints how long the API's count reads were refused
// around the faults.
func TestClusterStaysExact(t *testing.T) {
	const pw = "cluster-test-redis-password"
	topologies := []struct {
		name  string
		start func(t *testing.T) (flags []string, killPrimaries []func(t *testing.T))
	}{
		{"sentinel", func(t *testing.T) ([]string, []func(*testing.T)) {
			r := testinfra.StartSentinelRedis(t, t.TempDir(), pw)
			flags := []string{"--redis.addr", strings.Join(r.Sentinels, ","), "--redis.sentinel_master", r.Master, "--redis.password", pw}
			return flags, []func(*testing.T){func(*testing.T) { r.Primary.Kill() }}
		}},
		{"cluster", func(t *testing.T) ([]string, []func(*testing.T)) {
			r := testinfra.StartRedisCluster(t, t.TempDir(), pw)
			// A cluster replaces a dead primary only while most primaries live, so each kill
			// waits for the replica's promotion before the next one.
			kill := func(key string) func(*testing.T) {
				return func(t *testing.T) {
					victim := r.PrimaryOf(t, key)
					victim.Kill()
					killed := time.Now()
					testinfra.WaitFor(t, 30*time.Second, "a replica promoted in place of "+victim.Addr, func() (bool, string) {
						return r.PrimaryOf(t, key) != victim, "still " + victim.Addr
					})
					t.Logf("the cluster promoted a replica %s after the primary serving %s died", time.Since(killed).Round(100*time.Millisecond), key)
				}
			}
			return []string{"--redis.addr", r.Addrs(), "--redis.cluster", "--redis.password", pw},
				[]func(*testing.T){kill("t1:{views}:ready"), kill(likestate.ReadyKey)}
		}},
	}
	for _, tt := range topologies {
		t.Run(tt.name, func(t *testing.T) {
			flags, kills := tt.start(t)
			clusterStaysExact(t, flags, kills)
		})
	}
}

// clusterStaysExact is TestClusterStaysExact on the Redis that redisFlags name, whose primaries
// killPrimaries SIGKILL, one after another.
func clusterStaysExact(t *testing.T, redisFlags []string, killPrimaries []func(*testing.T)) {
	n := 80_000
	if s := os.Getenv("TALLY_EO_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := startClusterWith(t, clusterOptions{aggregators: 3, collectors: 2, kafkaBrokers: 3, redis: redisFlags})
	cl, err := c.kc.client(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, schemas.TopicViews)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range topics[schemas.TopicViews].Partitions {
		if len(p.Replicas) != 3 {
			t.Fatalf("views partition %d: got %d replicas; want 3 on three brokers", p.Partition, len(p.Replicas))
		}
	}

	refused := watchReads(ctx, c.apis[0]+"/v1/counts?ids=item-hot,item-1")
	// Counter adds (eventual, and accurate ones checked at each add) through the collector that
	// is killed, behind the client's retries.
	faultsOver := make(chan struct{})
	cc, addsSent, addsDone, wantAdds := goSendCounterAdds(t, ctx, c.apis[1], 200, faultsOver)
	// Like changes through both collectors in turn; clicks through the one that lives.
	likes := goSendLikes(t, ctx, c.apis)
	var clicksPosted atomic.Int64
	clicksDone := make(chan error, 1)
	go func() { clicksDone <- postRecentClicks(ctx, c.apis[0], max(1, n/10), 400, &clicksPosted) }()
	var posted, upTo atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, api := range c.apis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- postEvents(ctx, api, n, pacing{perSecond: 4_000, upTo: &upTo}, &posted)
		}()
	}
	// Each fault comes at a share of the views posted, and the posters run at most 5% of the load
	// past it until the next one: every fault lands while views arrive, however long the test
	// waits after one (a group's handover, a replica's promotion) on however fast a machine.
	at := func(share float64) {
		upTo.Store(int64(min(1, share+0.05) * float64(n)))
		testinfra.WaitFor(t, 3*time.Minute, "the load to go on", func() (bool, string) {
			return float64(posted.Load()) >= share*float64(2*n), strconv.FormatInt(posted.Load(), 10) + " posted"
		})
	}
	at(0.15)
	c.infra.signal(syscall.SIGUSR1)
	t.Logf("every partition leader moved after %d views", posted.Load())
	at(0.2)
	_ = c.aggs[0].stop(syscall.SIGKILL, 10*time.Second)
	killed := time.Now()
	c.addAggregator(t)
	t.Logf("aggregator-0 SIGKILLed for good and aggregator-3 started after %d views, %d counter adds", posted.Load(), addsSent.Load())
	took, trail := waitGroupsWhole(t, ctx, cl, "agg-0", killed)
	t.Logf("every partition of the aggregators' groups owned by a live member %s after the kill; on the way: %s", took, trail)
	at(0.3)
	c.infra.signal(syscall.SIGUSR2)
	removed := time.Now()
	t.Logf("a broker removed for good (group coordinators moved) after %d views", posted.Load())
	took, trail = waitGroupsWhole(t, ctx, cl, "agg-0", removed)
	t.Logf("every partition of the aggregators' groups owned by a live member %s after the removal; on the way: %s", took, trail)
	for i, kill := range killPrimaries {
		at(0.4 + 0.1*float64(i))
		t.Logf("SIGKILL redis primary %d after %d views, %d counter adds", i, posted.Load(), addsSent.Load())
		kill(t)
	}
	at(0.65)
	c.infra.signal(syscall.SIGUSR1)
	t.Logf("leaders moved again after %d views", posted.Load())
	at(0.7)
	_ = c.colls[1].stop(syscall.SIGKILL, 10*time.Second)
	time.Sleep(time.Second)
	if err := c.colls[1].start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("collector-1 SIGKILLed and started again after %d views, %d counter adds", posted.Load(), addsSent.Load())
	close(faultsOver)
	upTo.Store(int64(n))
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-addsDone; err != nil {
		t.Fatal(err)
	}
	if err := likes.stopAndWait(); err != nil {
		t.Fatal(err)
	}
	if err := <-clicksDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d counter adds, %d like changes, %d clicks sent", addsSent.Load(), likes.sent.Load(), clicksPosted.Load())
	total, longest := refused()
	t.Logf("count reads refused for %s in all, %s at the longest stretch", total.Round(10*time.Millisecond), longest.Round(10*time.Millisecond))
	// A Redis failover in a claim storm: the view totals a failover lost are rebuilt once the
	// partitions' new owners have replayed from their claims' starts, and count reads fall back
	// to a ClickHouse busy with that replay, where they go before its writes (docs/SCALING.md).
	if longest > 15*time.Second {
		t.Errorf("count reads refused for %s in a row; want at most 15 s", longest.Round(10*time.Millisecond))
	}
	waitRebuiltAfterFlush(t, ctx, redisFlags)
	verifyExact(t, ctx, c.kc, c.ch, c.api)
	waitCountersExact(t, ctx, cc, *wantAdds, func() string { return explainCounters(ctx, c.kc, c.ch) })
	verifyLikes(t, ctx, c.kc, c.apis[0], likes)
	verifyClicks(t, ctx, c.kc, c.ch)
}

// waitRebuiltAfterFlush empties the Redis redisFlags name (FLUSHALL on every primary, as a
// Redis that lost its data) and waits until the aggregators have rebuilt the view totals from
// ClickHouse and the collectors the like state from the log (their ready markers set again).
func waitRebuiltAfterFlush(t *testing.T, ctx context.Context, redisFlags []string) {
	t.Helper()
	cfg, err := config.Load("test", redisFlags)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := redisclient.New(cfg.Redis.Options())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	flush := func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() }
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, flush)
	} else {
		err = rdb.FlushAll(ctx).Err()
	}
	if err != nil {
		t.Fatalf("flush redis: %v", err)
	}
	flushed := time.Now()
	for _, key := range []string{"t1:{views}:ready", likestate.ReadyKey} {
		testinfra.WaitFor(t, 2*time.Minute, key+" set again after FLUSHALL", func() (bool, string) {
			n, err := rdb.Exists(ctx, key).Result()
			return err == nil && n == 1, fmt.Sprint(n, err)
		})
		t.Logf("%s set again %s after FLUSHALL", key, time.Since(flushed).Round(100*time.Millisecond))
	}
}

// waitGroupsWhole waits until each aggregator group (views, clicks, counters) is stable with
// every partition of its topics assigned and no member of instance id gone, and returns how
// long after since that was, and the groups' states on the way, each from when it was seen.
func waitGroupsWhole(t *testing.T, ctx context.Context, cl *kgo.Client, gone string, since time.Time) (time.Duration, string) {
	t.Helper()
	adm := kadm.NewClient(cl)
	groups := map[string][]string{
		"tally-aggregator":          {schemas.TopicViews},
		"tally-aggregator-clicks":   {schemas.TopicClicks, schemas.TopicFraudVerdicts},
		"tally-aggregator-counters": {schemas.TopicCounterEvents},
	}
	// The states passed through, each with when it was first seen, say where a long handover
	// waited (a member not yet timed out, a rebalance not yet complete).
	var trail []string
	last := ""
	testinfra.WaitFor(t, time.Minute, "the aggregators' groups own every partition", func() (bool, string) {
		ok, states := groupsWhole(ctx, adm, groups, gone)
		if states != last {
			trail, last = append(trail, fmt.Sprintf("%.1fs: %s", time.Since(since).Seconds(), states)), states
		}
		return ok, states
	})
	return time.Since(since).Round(100 * time.Millisecond), strings.Join(trail, "; ")
}

// groupsWhole reports whether every group of groups is stable, without the member gone, and
// owns every partition of its topics, with each group's state in a few words.
func groupsWhole(ctx context.Context, adm *kadm.Client, groups map[string][]string, gone string) (bool, string) {
	names := slices.Sorted(maps.Keys(groups))
	described, err := adm.DescribeGroups(ctx, names...)
	if err != nil {
		return false, err.Error()
	}
	var topics []string
	for _, ts := range groups {
		topics = append(topics, ts...)
	}
	listed, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return false, err.Error()
	}
	whole := true
	var states []string
	for _, name := range names {
		g := described[name]
		state := strings.TrimPrefix(name, "tally-") + " " + g.State
		if g.Err != nil {
			state += fmt.Sprintf(" (%v)", g.Err)
		}
		stays := slices.ContainsFunc(g.Members, func(m kadm.DescribedGroupMember) bool {
			return m.InstanceID != nil && *m.InstanceID == gone
		})
		if stays {
			state += " with " + gone
		}
		unowned, assigned := 0, g.AssignedPartitions()
		for _, topic := range groups[name] {
			for p := range listed[topic].Partitions {
				if !assigned.Lookup(topic, p) {
					unowned++
				}
			}
		}
		if unowned > 0 {
			state += fmt.Sprintf(", %d partitions unowned", unowned)
		}
		whole = whole && g.Err == nil && g.State == "Stable" && !stays && unowned == 0
		states = append(states, state)
	}
	return whole, strings.Join(states, ", ")
}

// watchReads reads url every 100 ms until ctx ends; the returned func stops it and says how long
// reads were answered with anything but 200, in all and at the longest stretch.
func watchReads(ctx context.Context, url string) func() (total, longest time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var total, longest time.Duration
	go func() {
		defer close(done)
		client := &http.Client{Timeout: 2 * time.Second}
		var since time.Time // start of the current refused stretch
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t0 := time.Now()
			ok := false
			if resp, err := client.Get(url); err == nil {
				ok = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
			switch {
			case !ok && since.IsZero():
				since = t0
			case ok && !since.IsZero():
				total += time.Since(since)
				longest = max(longest, time.Since(since))
				since = time.Time{}
			}
		}
	}()
	return func() (time.Duration, time.Duration) {
		cancel()
		<-done
		return total, longest
	}
}
