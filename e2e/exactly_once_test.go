package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/viewerhours"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The exactly-once test's load. TALLY_EO_EVENTS overrides the event count for quicker local runs.
const (
	eoEvents     = 1_000_000
	eoItems      = 5000
	eoViewers    = 200_000
	eoBatch      = 5000
	eoPosters    = 4
	eoPartitions = 8
	eoMinKills   = 5
	// eoAllInOneKills is how often the all-in-one test kills the process, if the load lasts.
	eoAllInOneKills = 8
	// eoAllInOneClickRate paces the all-in-one test's clicks (a tenth of its views' count), so
	// that they outlast the views and the kills go on while they arrive.
	eoAllInOneClickRate = 300
	dedupeWindow        = 30 * time.Minute
	dedupeGrace         = 10 * time.Minute
	eoEventMinute       = int64(time.Minute / time.Millisecond)
	// eoCountEvery: one event in this many is an edge view count.
	eoCountEvery = 50
)

// TestViewsExactlyOnceThroughCrashes posts a million views (half on one hot item, 20%
// duplicates, some late) through the collector while two aggregator processes share the
// partitions and are SIGKILLed at random at least five times, and the infrastructure process
// (Kafka broker and ClickHouse, with Redis) is SIGKILLed at random at least five times, so that
// some kills land inside an INSERT. Afterwards every (item, second) total, every rollup bucket
// and every item total the API answers must equal an oracle computed independently from the log.
func TestViewsExactlyOnceThroughCrashes(t *testing.T) {
	t.Parallel() // asserts the end state alone (doc.go)
	n := eoEvents
	if s := os.Getenv("TALLY_EO_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c := startCluster(t, 2)

	// Chaos while the load runs: every 1-3 s SIGKILL either a random aggregator or the
	// infrastructure process, and restart it after a short pause.
	var posted atomic.Int64
	stopChaos := make(chan struct{})
	type kills struct{ aggs, infra int }
	chaosDone := make(chan kills)
	go func() {
		rng := rand.New(rand.NewPCG(42, 1))
		var k kills
		defer func() { chaosDone <- k }()
		for {
			select {
			case <-stopChaos:
				if k.aggs >= eoMinKills && k.infra >= eoMinKills {
					return
				}
			case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
			}
			p := c.aggs[rng.IntN(len(c.aggs))]
			if k.infra < k.aggs && rng.IntN(2) == 0 || k.infra < eoMinKills && k.aggs >= eoMinKills {
				p = c.infra
			}
			_ = p.stop(syscall.SIGKILL, 10*time.Second)
			if p == c.infra {
				k.infra++
				t.Logf("infra (broker, ClickHouse, Redis) killed after %d events", posted.Load())
			} else {
				k.aggs++
			}
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
			if err := p.start(); err != nil {
				t.Errorf("restart %s: %v", p.name, err)
				return
			}
		}
	}()

	t0 := time.Now()
	if err := postEvents(ctx, c.api, n, pacing{}, &posted); err != nil {
		t.Fatal(err)
	}
	t.Logf("posted %d events in %s", n, time.Since(t0).Round(time.Millisecond))
	close(stopChaos)
	k := <-chaosDone
	if k.aggs < eoMinKills || k.infra < eoMinKills {
		t.Fatalf("got %d aggregator and %d infra kills; want at least %d of each", k.aggs, k.infra, eoMinKills)
	}
	t.Logf("aggregators killed %d times, infra %d times", k.aggs, k.infra)
	// The last restart may still be starting.
	testinfra.WaitHTTP(t, time.Minute, "http://"+c.clickhouse+"/ping")
	testinfra.WaitHTTP(t, time.Minute, c.api+"/readyz")
	verifyExact(t, ctx, c.kc, c.ch, c.api)
	if c.coll.exited() {
		t.Error("collector exited during the test (its log follows)")
	}
}

// TestAllInOneExactlyOnceThroughKills is the same promise in the mode most users start with:
// one `pipeline run` process holding Kafka, ClickHouse, Redis, the aggregator, topk and the
// collector, SIGKILLed at random at least five times while views and clicks are posted, and
// started again with the same command. Besides the views, every click count and the ads top-K
// lists topk publishes (1m and 1h exact, 24h within its bound) must equal the oracle's.
func TestAllInOneExactlyOnceThroughKills(t *testing.T) {
	t.Parallel() // asserts the end state alone (doc.go)
	n := eoEvents / 4
	if s := os.Getenv("TALLY_EO_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	kafkaAddr, chAddr, apiAddr, aggAddr := testinfra.MustFreeAddr(t), testinfra.MustFreeAddr(t), testinfra.MustFreeAddr(t), testinfra.MustFreeAddr(t)
	_, redisPort, _ := strings.Cut(testinfra.MustFreeAddr(t), ":")
	all := startProc(t, "all-in-one", bins.pipeline, dir, "run", "--data_dir", dir, "--demo.enabled=false",
		"--kafka.partitions", strconv.Itoa(eoPartitions), "--embedded.kafka_addr", kafkaAddr,
		"--embedded.clickhouse_addr", chAddr, "--embedded.redis_port", redisPort,
		"--collector.addr", apiAddr, "--collector.max_lines", strconv.Itoa(eoBatch), "--collector.max_body_bytes", "8388608",
		"--aggregator.addr", aggAddr, "--aggregator.flush_interval", "200ms",
		"--views.dedupe_window", dedupeWindow.String(), "--views.dedupe_grace", dedupeGrace.String())
	api := "http://" + apiAddr
	testinfra.WaitHTTP(t, time.Minute, api+"/readyz")
	ch, kc := adminOptions(t, dir), kafkaOf(infraEnv(t, dir))

	// Kill it at a random moment once it is serving again, while views are still being posted.
	var posted atomic.Int64
	postDone := make(chan error, 1)
	// Paced so that the load outlasts at least eoMinKills restarts of the whole process (each
	// start runs every component's recovery first).
	go func() { postDone <- postEvents(ctx, api, n, pacing{perSecond: 12_500}, &posted) }()
	var clicksPosted atomic.Int64
	clicksDone := make(chan error, 1)
	go func() { clicksDone <- postRecentClicks(ctx, api, max(1, n/10), eoAllInOneClickRate, &clicksPosted) }()
	rng := rand.New(rand.NewPCG(43, 1))
	kills := 0
	for kills < eoAllInOneKills {
		testinfra.WaitHTTP(t, time.Minute, api+"/readyz")
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		if posted.Load() >= int64(n) && clicksPosted.Load() >= int64(max(1, n/10)) {
			break
		}
		_ = all.stop(syscall.SIGKILL, 10*time.Second)
		kills++
		t.Logf("all-in-one killed after %d views and %d clicks", posted.Load(), clicksPosted.Load())
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		if err := all.start(); err != nil {
			t.Fatalf("restart the all-in-one: %v", err)
		}
	}
	if err := <-postDone; err != nil {
		t.Fatal(err)
	}
	if err := <-clicksDone; err != nil {
		t.Fatal(err)
	}
	if kills < eoMinKills {
		t.Fatalf("got %d kills while views and clicks were posted; want at least %d", kills, eoMinKills)
	}
	testinfra.WaitHTTP(t, time.Minute, api+"/readyz")
	// The clicks first: the 1m window still holds some of them.
	verifyAdsTop(t, verifyClicks(t, ctx, kc, ch), api)
	verifyExact(t, ctx, kc, ch, api)
}

// TestZombieAggregatorIsFenced makes an aggregator a zombie, three times: a long query holds the
// one-query-at-a-time embedded engine, so the aggregator's next flush waits on its first
// statement; the aggregator is then stopped with SIGSTOP for three session timeouts (the group
// moves its partitions to the other, which reads the checkpoint and writes on) and resumed with
// SIGCONT: its flush goes on to its deltas INSERT after the new owner took over. That batch must
// not be counted on top of what its successor writes, and nothing else the woken aggregator
// still sends (rollups, repairs, sketches) may change a table: every table is checked, as in the
// other crash tests.
func TestZombieAggregatorIsFenced(t *testing.T) {
	t.Parallel() // asserts the end state alone (doc.go)
	n := eoEvents / 4
	if s := os.Getenv("TALLY_EO_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := startCluster(t, 2)
	conn, err := chclient.Open(ctx, c.ch)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var posted atomic.Int64
	stopped := make(chan int)
	go func() {
		stops := 0
		defer func() { stopped <- stops }()
		for i := 0; i < 3 && ctx.Err() == nil; i++ {
			time.Sleep(1500 * time.Millisecond)
			p := c.aggs[i%len(c.aggs)]
			hold := make(chan error, 1)
			go func() {
				hold <- conn.Exec(ctx, "SELECT sum(sleepEachRow(0.5)) FROM numbers(5) SETTINGS max_block_size = 1")
			}()
			time.Sleep(700 * time.Millisecond) // a flush (every 200 ms) is now waiting on the engine
			p.signal(syscall.SIGSTOP)
			t.Logf("%s stopped after %d events", p.name, posted.Load())
			if err := <-hold; err != nil {
				t.Errorf("hold the engine: %v", err)
			}
			time.Sleep(3 * eoSessionTimeout) // the group moves its partitions to the other
			p.signal(syscall.SIGCONT)
			stops++
		}
	}()
	if err := postEvents(ctx, c.api, n, pacing{perSecond: 5_000}, &posted); err != nil {
		t.Fatal(err)
	}
	if stops := <-stopped; stops < 3 {
		t.Fatalf("got %d stops; want 3", stops)
	}
	verifyExact(t, ctx, c.kc, c.ch, c.api)
}

// eoSessionTimeout is the aggregators' group session timeout in the crash tests.
const eoSessionTimeout = 3 * time.Second

// cluster is the infrastructure process, a collector and aggregators as separate processes.
type cluster struct {
	infra, coll            *proc   // coll is colls[0]
	colls, aggs            []*proc // the collectors and the aggregators
	apis                   []string
	kafka, clickhouse, api string           // api is apis[0]
	ch                     chclient.Options // the engine's administrator, database tally
	kc                     kafkaConn        // the broker, as its SASL user
	bin, dir               string           // the aggregator binary and the data directory
	aggArgs                []string         // every aggregator's flags but its address and id
}

func startCluster(t *testing.T, aggregators int, aggFlags ...string) *cluster {
	t.Helper()
	return startClusterWith(t, clusterOptions{aggregators: aggregators, collectors: 1, aggFlags: aggFlags})
}

// clusterOptions say what startClusterWith runs beside `pipeline infra`.
type clusterOptions struct {
	aggregators, collectors int
	aggFlags                []string // every aggregator's further flags
	kafkaBrokers            int      // brokers of the infra process's Kafka cluster; 0 means 1
	// redis, if set, are the flags naming the Redis every process uses (a Sentinel-watched
	// primary, a Redis Cluster) instead of the infra process's own.
	redis []string
}

func startClusterWith(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &cluster{kafka: testinfra.MustFreeAddr(t), clickhouse: testinfra.MustFreeAddr(t)}
	// The level is info unless TALLY_LOG_LEVEL asks for more (the group's own logs are debug).
	level := cmp.Or(os.Getenv(config.EnvName("log.level")), "info")
	common := []string{"--data_dir", dir, "--kafka.partitions", strconv.Itoa(eoPartitions), "--log.level", level}
	redisFlags := o.redis
	_, redisPort, _ := strings.Cut(testinfra.MustFreeAddr(t), ":")
	if o.kafkaBrokers > 1 {
		c.kafka = "127.0.0.1:0" // free ports for each; the env file says which
	}
	infraArgs := append(append([]string{"infra", "--embedded.kafka_addr", c.kafka, "--embedded.kafka_brokers", strconv.Itoa(max(o.kafkaBrokers, 1)),
		"--embedded.clickhouse_addr", c.clickhouse, "--embedded.redis_port", redisPort}, common...), redisFlags...)
	c.infra = startProc(t, "infra", bins.pipeline, dir, infraArgs...)
	testinfra.WaitHTTP(t, time.Minute, "http://"+c.clickhouse+"/ping")
	// The infra process writes its servers' addresses and passwords last; components get them
	// as flags, as an operator's would from the file.
	env := infraEnv(t, dir)
	c.ch = chclient.Options{Addr: c.clickhouse, Database: "tally", Username: env[config.EnvName("clickhouse.username")], Password: env[config.EnvName("clickhouse.password")]}
	c.kc = kafkaOf(env)
	c.kafka = c.kc.addr
	if o.redis == nil {
		redisFlags = []string{"--redis.addr", env[config.EnvName("redis.addr")], "--redis.password", env[config.EnvName("redis.password")]}
	}
	conns := append(append([]string{"--kafka.brokers", c.kafka, "--kafka.sasl.mechanism", c.kc.sec.SASLMechanism,
		"--kafka.sasl.username", c.kc.sec.Username, "--kafka.sasl.password", c.kc.sec.Password,
		"--clickhouse.addr", c.clickhouse, "--clickhouse.password", c.ch.Password}, redisFlags...), common...)
	for i := range o.collectors {
		apiAddr := testinfra.MustFreeAddr(t)
		c.apis = append(c.apis, "http://"+apiAddr)
		c.colls = append(c.colls, startProc(t, fmt.Sprintf("collector-%d", i), bins.collector, dir, append([]string{"--collector.addr", apiAddr,
			"--collector.max_lines", strconv.Itoa(eoBatch), "--collector.max_body_bytes", "8388608"}, conns...)...))
		testinfra.WaitHTTP(t, time.Minute, c.apis[i]+"/readyz")
	}
	c.api, c.coll = c.apis[0], c.colls[0]
	c.bin, c.dir = bins.aggregator, dir
	c.aggArgs = append(append([]string{"--aggregator.flush_interval", "200ms", "--aggregator.session_timeout", eoSessionTimeout.String(),
		"--views.dedupe_window", dedupeWindow.String(), "--views.dedupe_grace", dedupeGrace.String()}, conns...), o.aggFlags...)
	for range o.aggregators {
		c.addAggregator(t)
	}
	return c
}

// addAggregator starts one more aggregator process, a new member of the group.
func (c *cluster) addAggregator(t *testing.T) *proc {
	i := len(c.aggs)
	p := startProc(t, fmt.Sprintf("aggregator-%d", i), c.bin, c.dir, append([]string{
		"--aggregator.addr", testinfra.MustFreeAddr(t), "--aggregator.instance_id", fmt.Sprintf("agg-%d", i)}, c.aggArgs...)...)
	c.aggs = append(c.aggs, p)
	return p
}

// caughtUp reports whether every checkpoint query's offset of each partition reached ends,
// else which is behind.
func caughtUp(ctx context.Context, conn driver.Conn, checkpoints []string, ends kadm.ListedOffsets) (bool, string) {
	for _, q := range checkpoints {
		got, err := partitionOffsets(ctx, conn, q)
		if err != nil {
			return false, err.Error()
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			if got[o.Partition] < o.Offset {
				behind = append(behind, fmt.Sprintf("partition %d at %d of %d", o.Partition, got[o.Partition], o.Offset))
			}
		})
		if len(behind) > 0 {
			sort.Strings(behind)
			return false, fmt.Sprintf("%s (%s)", strings.Join(behind, ", "), q)
		}
	}
	return true, ""
}

// verifyExact waits until the aggregators have caught up with the log, computes the oracle from
// the log, and compares with it every (item, second) total in view_deltas, every bucket of every
// rollup, and every item's views as GET /v1/counts answers them. Derived state that heals on
// its own (a zombie's batch is undone within a sketch interval; the API's Redis is rebuilt after
// a restart) gets a minute to agree before the differences are reported.
func verifyExact(t *testing.T, ctx context.Context, kc kafkaConn, ch chclient.Options, api string) {
	t.Helper()
	t0 := time.Now()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := kc.client(logger)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ends kadm.ListedOffsets
	testinfra.WaitFor(t, time.Minute, "the log's end offsets", func() (bool, string) {
		var err error
		ends, err = kadm.NewClient(cl).ListEndOffsets(ctx, schemas.TopicViews)
		if err == nil {
			err = ends.Error()
		}
		return err == nil, fmt.Sprint(err)
	})
	conn, err := chclient.Open(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Caught up: both checkpoints of every partition (deltas, and the sketches written every
	// aggregator.sketch_interval) reach its end.
	checkpoints := []string{
		"SELECT partition, max(end_offset) FROM view_deltas WHERE item_id = '' GROUP BY partition",
		"SELECT partition, max(end_offset) FROM sketch_checkpoints GROUP BY partition",
	}
	logged := time.Now()
	testinfra.WaitForEvery(t, 4*time.Minute, 200*time.Millisecond, "aggregators catch up", func() (bool, string) {
		ok, behind := caughtUp(ctx, conn, checkpoints, ends)
		if !ok && time.Since(logged) > 10*time.Second {
			logged = time.Now()
			t.Logf("catching up, %s after the last post: %s", time.Since(t0).Round(time.Second), behind)
		}
		return ok, behind
	})
	t.Logf("caught up %s after the last post", time.Since(t0).Round(time.Millisecond))

	oracle := computeOracle(t, ctx, cl, ends)
	t.Logf("oracle: %d records (%d edge view counts), %d counted views over %d items", oracle.records, oracle.countRecords, oracle.counted, len(oracle.items))
	if oracle.countRecords == 0 {
		t.Error("oracle: got no edge view counts in the log; want the load's")
	}

	type check struct {
		name string
		got  func() (map[string]int64, error)
		want map[string]int64
	}
	bucketed := func(width int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range oracle.seconds {
			out[fmt.Sprintf("%s@%d", k.item, schemas.FloorDiv(k.second, width)*width)] += int64(v)
		}
		return out
	}
	perSecond := map[string]int64{}
	for k, v := range oracle.seconds {
		perSecond[fmt.Sprintf("%s@%d", k.item, k.second)] = int64(v)
	}
	perItem := map[string]int64{}
	for k, v := range oracle.items {
		perItem[k] = int64(v)
	}
	rows := func(q string) func() (map[string]int64, error) {
		return func() (map[string]int64, error) { return keyedTotals(ctx, conn, q) }
	}
	checks := []check{
		{"view_deltas (item, second)", rows("SELECT concat(item_id, '@', toString(toUnixTimestamp(second))), toInt64(sum(views)) FROM view_deltas WHERE item_id != '' GROUP BY 1"), perSecond},
		{"views_by_minute (item, minute)", rows("SELECT concat(item_id, '@', toString(toUnixTimestamp(minute))), toInt64(sum(views)) FROM views_by_minute GROUP BY 1 HAVING sum(views) != 0"), bucketed(60)},
		{"views_by_hour (item, hour)", rows("SELECT concat(item_id, '@', toString(toUnixTimestamp(hour))), toInt64(sum(views)) FROM views_by_hour GROUP BY 1 HAVING sum(views) != 0"), bucketed(3600)},
		{"views_by_day (item, day)", rows("SELECT concat(item_id, '@', toString(toUnixTimestamp(toDateTime(day)))), toInt64(sum(views)) FROM views_by_day GROUP BY 1 HAVING sum(views) != 0"), bucketed(86400)},
		{"views_total_by_day (item, day)", rows("SELECT concat(item_id, '@', toString(toUnixTimestamp(toDateTime(day)))), toInt64(sum(views)) FROM views_total_by_day GROUP BY 1 HAVING sum(views) != 0"), bucketed(86400)},
		{"views_total (item)", rows("SELECT item_id, toInt64(sum(views)) FROM views_total GROUP BY 1 HAVING sum(views) != 0"), perItem},
		{"GET /v1/counts (item)", func() (map[string]int64, error) { return apiViews(ctx, api, perItem) }, perItem},
	}
	for _, c := range checks {
		t.Run("every "+c.name, func(t *testing.T) {
			var got map[string]int64
			testinfra.WaitForEvery(t, time.Minute, time.Second, c.name+" equal the oracle", func() (bool, string) {
				var err error
				if got, err = c.got(); err != nil {
					return false, err.Error()
				}
				d := diffTotals(got, c.want)
				return len(d) == 0, fmt.Sprintf("%d differ, e.g. %v", len(d), d[:min(len(d), 5)])
			})
		})
		if t.Failed() {
			// Which partitions fell short, and how they changed hands (docs: the claims' epochs
			// and starts), while the test's context may have run out.
			logRows(t, conn,
				"SELECT toString(tuple(partition, toInt64(sum(views)))) FROM view_deltas WHERE item_id != '' GROUP BY partition ORDER BY partition",
				"SELECT toString(tuple(partition, count(), min(end_offset), max(end_offset))) FROM view_deltas WHERE item_id = '' GROUP BY partition ORDER BY partition",
				"SELECT toString(tuple(partition, epoch, start_offset, owner, toString(claimed_at))) FROM partition_claims ORDER BY partition, claimed_at")
			t.Logf("the log's end offsets: %v", ends)
			break
		}
	}
	// An estimate skipped while an item took viewers is written within 30 s (estimateEvery)
	// and a sketch interval.
	// The unions of an item's hour sketches and of its minute sketches hold every viewer of the
	// log as well.
	t.Run("unique viewers within HyperLogLog error", func(t *testing.T) {
		for _, item := range []string{"item-hot", "item-1", "item-2"} {
			want := float64(len(oracle.viewers[item]))
			var est, hours, minutes uint64
			ok := false
			for deadline := time.Now().Add(time.Minute); !ok && time.Now().Before(deadline); time.Sleep(time.Second) {
				err := conn.QueryRow(ctx, "SELECT viewers FROM unique_viewers_latest WHERE item_id = ? AND day = toDate(0)", item).Scan(&est)
				if err == nil {
					hours, minutes, err = hourSketchesUnion(ctx, conn, item)
				}
				ok = err == nil && math.Abs(float64(est)-want) <= 0.03*want+3 && math.Abs(float64(hours)-want) <= 0.03*want+3 &&
					math.Abs(float64(minutes)-want) <= 0.03*want+3
			}
			if !ok {
				t.Errorf("%s: got %d unique viewers all-time, %d over its hours and %d over its minutes; want %.0f within 3%%", item, est, hours, minutes, want)
				logRows(t, conn,
					"SELECT toString(tuple(toString(updated_at), viewers)) FROM unique_viewers WHERE item_id = '"+item+"' AND day = toDate(0) ORDER BY updated_at DESC LIMIT 8",
					"SELECT toString(tuple(partition, end_offset, toString(written_at), viewers)) FROM unique_viewer_deltas WHERE item_id = '"+item+"' AND day = toDate(0) ORDER BY written_at DESC LIMIT 8",
					"SELECT toString(tuple(partition, end_offset, toString(written_at))) FROM sketch_checkpoints ORDER BY written_at DESC LIMIT 12",
					"SELECT toString(tuple(partition, epoch, start_offset, owner, toString(claimed_at))) FROM partition_claims ORDER BY claimed_at")
			}
		}
	})
}

// logRows logs what each query (one String column) returns, or its error, with a context of its
// own: a failing test's may have run out.
func logRows(t *testing.T, conn driver.Conn, queries ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, q := range queries {
		var rows []string
		err := chclient.Each(ctx, conn, q, nil, func(r driver.Rows) error {
			var s string
			if err := r.Scan(&s); err != nil {
				return err
			}
			rows = append(rows, s)
			return nil
		})
		t.Logf("%s:\n%v (err %v)", q, rows, err)
	}
}

// hourSketchesUnion estimates the viewers of item's hour sketches together (migration 022)
// and of its minute sketches together (023).
func hourSketchesUnion(ctx context.Context, conn driver.Conn, item string) (hours, minutes uint64, err error) {
	var regs, ranks, minuteRanks []uint16
	var keys []uint32
	if err := conn.QueryRow(ctx, `SELECT h.1, arrayMap(x -> toUInt16(x), h.2), m.1, arrayMap(x -> toUInt16(x), m.2) FROM
		(SELECT maxMap(registers) AS h, maxMap(minutes) AS m FROM unique_viewers_by_hour WHERE item_id = ?)`, item).Scan(&regs, &ranks, &keys, &minuteRanks); err != nil {
		return 0, 0, err
	}
	var h, m viewerhours.Registers
	for i := range regs {
		h.Set(regs[i], uint8(ranks[i]))
	}
	for i, k := range keys {
		_, reg, _ := viewerhours.SplitKey(k)
		m.Set(reg, uint8(minuteRanks[i]))
	}
	return h.Estimate(), m.Estimate(), nil
}

// keyedTotals reads (key, total) rows of q.
func keyedTotals(ctx context.Context, conn driver.Conn, q string) (map[string]int64, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// apiViews reads the views of every item in want through GET /v1/counts, a page at a time.
func apiViews(ctx context.Context, api string, want map[string]int64) (map[string]int64, error) {
	items := make([]string, 0, len(want))
	for it := range want {
		items = append(items, it)
	}
	out := map[string]int64{}
	for page := range slices.Chunk(items, 100) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/counts?ids="+url.QueryEscape(strings.Join(page, ",")), nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		var body struct {
			Items []struct {
				ItemID string `json:"item_id"`
				Views  int64  `json:"views"`
			} `json:"items"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			return nil, fmt.Errorf("GET /v1/counts: status %d, %v", resp.StatusCode, err)
		}
		for _, it := range body.Items {
			if it.Views != 0 {
				out[it.ItemID] = it.Views
			}
		}
	}
	return out, nil
}

// diffTotals lists the keys whose totals differ, as "key: got X; want Y", sorted.
func diffTotals(got, want map[string]int64) []string {
	var d []string
	for k, w := range want {
		if g := got[k]; g != w {
			d = append(d, fmt.Sprintf("%s: got %d; want %d", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s: got %d; want none", k, g))
		}
	}
	sort.Strings(d)
	return d
}

// pacing holds postEvents back, so that faults land while views are still arriving: at most
// perSecond views a second when set, and, when upTo is set, no view at or past its value until
// the test moves it on (a wait of the test's cannot outlast the load).
type pacing struct {
	perSecond int
	upTo      *atomic.Int64
}

// postEvents posts n generated views as NDJSON batches from several goroutines, retrying a
// batch (same bytes, so same event ids) until it is accepted, as fast as pace lets it. It stops
// early, with ctx's error, when ctx ends.
func postEvents(ctx context.Context, api string, n int, pace pacing, posted *atomic.Int64) error {
	batches := make(chan []byte, eoPosters)
	errs := make(chan error, eoPosters)
	var wg sync.WaitGroup
	for range eoPosters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 60 * time.Second}
			for b := range batches {
				if err := postAccepted(ctx, client, api+"/v1/events", b); err != nil {
					errs <- err
					return
				}
				posted.Add(int64(bytes.Count(b, []byte{'\n'})))
			}
		}()
	}
	gen := newEventGen(n)
	var buf bytes.Buffer
	start := time.Now()
	for i := 0; i < n; i++ {
		if i%eoBatch == 0 {
			if pace.upTo != nil && int64(i) >= pace.upTo.Load() {
				held := time.Now()
				for int64(i) >= pace.upTo.Load() && ctx.Err() == nil {
					time.Sleep(20 * time.Millisecond)
				}
				start = start.Add(time.Since(held)) // the rate resumes where it was held
			}
			if ctx.Err() != nil {
				close(batches)
				wg.Wait()
				return ctx.Err()
			}
		}
		if pace.perSecond > 0 && i%eoBatch == 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(pace.perSecond))))
		}
		if i%eoCountEvery == eoCountEvery-1 {
			c := gen.nextCount()
			fmt.Fprintf(&buf, `{"type":"view_count","item_id":%q,"second":%d,"count":%d,"source_id":%q,"seq":%d}`+"\n", c.ItemID, c.Second, c.Count, c.SourceID, c.Seq)
		} else {
			e := gen.next()
			fmt.Fprintf(&buf, `{"type":"view","item_id":%q,"viewer_id":%q,"event_id":%q,"ts":%d}`+"\n", e.ItemID, e.ViewerID, e.EventID, e.TS)
		}
		if (i+1)%eoBatch == 0 || i == n-1 {
			select {
			case batches <- bytes.Clone(buf.Bytes()):
			case err := <-errs:
				close(batches)
				wg.Wait()
				return err
			}
			buf.Reset()
		}
	}
	close(batches)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// eventGen makes the load: half the views on item-hot, 20% repeats of a recent view (half exact
// retries with the same event id and time, half the same viewer and item a little later), and 3%
// late by up to 25 minutes (some beyond the dedupe grace).
//
// Every eoCountEvery-th event is an edge server's view count instead (nextCount): a fifth of them
// exact retries of a recent count, the rest new counts of 1 to 5,000 views from one of ten
// sources, at the time the views have reached, 3% of them up to 25 minutes late.
type eventGen struct {
	rng    *rand.Rand
	i, n   int
	base   int64
	recent []schemas.View
	// The view counts' own stream, so that the views are the same with or without them.
	crng         *rand.Rand
	seqs         [10]uint64
	recentCounts []schemas.ViewCount
}

func newEventGen(n int) *eventGen {
	return &eventGen{rng: rand.New(rand.NewPCG(7, 7)), n: n, base: time.Now().Add(-120 * time.Minute).UnixMilli(),
		crng: rand.New(rand.NewPCG(11, 11))}
}

// nextCount returns the next view count of the load.
func (g *eventGen) nextCount() schemas.ViewCount {
	if len(g.recentCounts) > 20 && g.crng.IntN(5) == 0 {
		return g.recentCounts[g.crng.IntN(len(g.recentCounts))]
	}
	src := g.crng.IntN(len(g.seqs))
	g.seqs[src]++
	item := "item-hot"
	if g.crng.IntN(2) == 0 {
		item = "item-" + strconv.Itoa(g.crng.IntN(eoItems))
	}
	ts := g.base + int64(g.i)*(90*eoEventMinute)/int64(g.n)
	if g.crng.IntN(33) == 0 {
		ts -= g.crng.Int64N(25 * eoEventMinute)
	}
	c := schemas.ViewCount{ItemID: item, Second: ts / 1000, Count: 1 + g.crng.Uint64N(5000), SourceID: "edge-" + strconv.Itoa(src), Seq: g.seqs[src]}
	if len(g.recentCounts) < 1000 {
		g.recentCounts = append(g.recentCounts, c)
	} else {
		g.recentCounts[g.crng.IntN(len(g.recentCounts))] = c
	}
	return c
}

func (g *eventGen) next() schemas.View {
	g.i++
	if len(g.recent) > 100 && g.rng.IntN(5) == 0 {
		prev := g.recent[g.rng.IntN(len(g.recent))]
		if g.rng.IntN(2) == 0 {
			return prev
		}
		prev.EventID = "e" + strconv.Itoa(g.i)
		prev.TS += g.rng.Int64N(20 * eoEventMinute)
		return prev
	}
	item := "item-hot"
	if g.rng.IntN(2) == 0 {
		item = "item-" + strconv.Itoa(g.rng.IntN(eoItems))
	}
	ts := g.base + int64(g.i)*(90*eoEventMinute)/int64(g.n) + g.rng.Int64N(1000)
	if g.rng.IntN(33) == 0 {
		ts -= g.rng.Int64N(25 * eoEventMinute)
	}
	v := schemas.View{ItemID: item, ViewerID: "viewer-" + strconv.Itoa(g.rng.IntN(eoViewers)), EventID: "e" + strconv.Itoa(g.i), TS: ts}
	if len(g.recent) < 10000 {
		g.recent = append(g.recent, v)
	} else {
		g.recent[g.rng.IntN(len(g.recent))] = v
	}
	return v
}

type secondKey struct {
	item   string
	second int64
}

type oracleResult struct {
	records, counted int64
	countRecords     int64 // edge view counts among the records
	seconds          map[secondKey]uint64
	items            map[string]uint64
	viewers          map[string]map[string]struct{}
}

// computeOracle reads the whole topic in offset order per partition and applies the dedupe rule
// of docs/EXACTLY_ONCE.md with plain string keys, independently of package dedupe.
func computeOracle(t *testing.T, ctx context.Context, cl *kgo.Client, ends kadm.ListedOffsets) oracleResult {
	res := oracleResult{seconds: map[secondKey]uint64{}, items: map[string]uint64{}, viewers: map[string]map[string]struct{}{}}
	window, horizon := dedupeWindow.Milliseconds(), (dedupeWindow + dedupeGrace).Milliseconds()
	offsets := map[string]map[int32]kgo.Offset{schemas.TopicViews: {}}
	ends.Each(func(o kadm.ListedOffset) { offsets[schemas.TopicViews][o.Partition] = kgo.NewOffset().AtStart() })
	cl.AddConsumePartitions(offsets)
	type state struct {
		watermark int64
		counted   map[string][]int64 // counted view times per (viewer, item)
		next      int64
	}
	parts := map[int32]*state{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		parts[o.Partition] = &state{watermark: math.MinInt64, counted: map[string][]int64{}}
		if o.Offset > 0 {
			remaining++
		}
	})
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("oracle: read log: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			st := parts[r.Partition]
			end, _ := ends.Lookup(r.Topic, r.Partition)
			if r.Offset >= end.Offset {
				return
			}
			if r.Offset != st.next {
				t.Fatalf("oracle: partition %d: got offset %d; want %d", r.Partition, r.Offset, st.next)
			}
			st.next++
			if st.next == end.Offset {
				remaining--
			}
			res.records++
			// A view is one view of its (viewer, item) pair; an edge view count is count views
			// under its (source, seq), at the start of its second.
			var item, key string
			var ts int64
			n := uint64(1)
			if schemas.RecordKind(r.Value) == schemas.KindViewCount {
				c, err := schemas.DecodeViewCount(r.Value)
				if err != nil {
					t.Fatalf("oracle: decode record: %v", err)
				}
				item, key, ts, n = c.ItemID, "\x01"+c.SourceID+"\x01"+strconv.FormatUint(c.Seq, 10), c.Second*1000, c.Count
				res.countRecords++
			} else {
				v, err := schemas.DecodeView(r.Value)
				if err != nil {
					t.Fatalf("oracle: decode record: %v", err)
				}
				if res.viewers[v.ItemID] == nil {
					res.viewers[v.ItemID] = map[string]struct{}{}
				}
				res.viewers[v.ItemID][v.ViewerID] = struct{}{}
				item, key, ts = v.ItemID, v.ViewerID+"\x00"+v.ItemID, v.TS
			}
			st.watermark = max(st.watermark, ts)
			// A record counts unless a counted record of its key still held (not older than
			// window + grace behind the watermark) lies within the window of it.
			held := st.counted[key][:0]
			counts := true
			for _, c := range st.counted[key] {
				if c < st.watermark-horizon {
					continue
				}
				held = append(held, c)
				if ts-c < window && c-ts < window {
					counts = false
				}
			}
			if counts && ts >= st.watermark-horizon {
				held = append(held, ts)
			}
			st.counted[key] = held
			if counts {
				res.counted += int64(n)
				res.seconds[secondKey{item, int64(math.Floor(float64(ts) / 1000))}] += n
				res.items[item] += n
			}
		})
	}
	return res
}

// partitionOffsets reads (partition, offset) rows of q.
func partitionOffsets(ctx context.Context, conn driver.Conn, q string) (map[int32]int64, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[int32]int64{}
	for rows.Next() {
		var p uint16
		var e int64
		if err := rows.Scan(&p, &e); err != nil {
			return nil, err
		}
		got[int32(p)] = e
	}
	return got, rows.Err()
}
