package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
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

	"tally/platform/chclient"
	"tally/platform/config"
	"tally/platform/kafka"
	"tally/platform/testinfra"
	"tally/schemas"
)

// The exactly-once test's load. TALLY_EO_EVENTS overrides the event count for quicker local runs.
const (
	eoEvents      = 1_000_000
	eoItems       = 5000
	eoViewers     = 200_000
	eoBatch       = 5000
	eoPosters     = 4
	eoPartitions  = 8
	eoMinKills    = 5
	dedupeWindow  = 30 * time.Minute
	dedupeGrace   = 10 * time.Minute
	eoEventMinute = int64(time.Minute / time.Millisecond)
)

// TestViewsExactlyOnceThroughCrashes posts a million views (half on one hot item, 20%
// duplicates, some late) through the collector while two aggregator processes share the
// partitions and are SIGKILLed at random at least five times, and the infrastructure process
// (Kafka broker and ClickHouse) is restarted once. Afterwards every (item, second) total and
// every item total in ClickHouse must equal an oracle computed independently from the log.
func TestViewsExactlyOnceThroughCrashes(t *testing.T) {
	n := eoEvents
	if s := os.Getenv("TALLY_EO_EVENTS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	bins, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := t.TempDir()
	addr := func() string {
		a, err := testinfra.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	kafkaAddr, chAddr, apiAddr := addr(), addr(), addr()
	common := []string{"--data_dir", dir, "--kafka.partitions", strconv.Itoa(eoPartitions), "--log.level", "info"}
	_, redisPort, _ := strings.Cut(addr(), ":")
	infraArgs := append([]string{"infra", "--kafka.embedded_addr", kafkaAddr, "--clickhouse.embedded_addr", chAddr, "--redis.embedded_port", redisPort}, common...)
	infra := startProc(t, "infra", bins.pipeline, dir, infraArgs...)
	testinfra.WaitHTTP(t, time.Minute, "http://"+chAddr+"/ping")
	// Redis starts last in the infra process; components find it through this file.
	testinfra.WaitFor(t, time.Minute, "infra writes the redis address", func() (bool, string) {
		_, err := os.Stat(filepath.Join(dir, config.RedisAddrFile))
		return err == nil, fmt.Sprint(err)
	})
	conns := append([]string{"--kafka.brokers", kafkaAddr, "--clickhouse.addr", chAddr}, common...)
	coll := startProc(t, "collector", bins.collector, dir, append([]string{"--collector.addr", apiAddr,
		"--collector.max_lines", strconv.Itoa(eoBatch), "--collector.max_body_bytes", "8388608"}, conns...)...)
	testinfra.WaitHTTP(t, time.Minute, "http://"+apiAddr+"/readyz")
	aggs := make([]*proc, 2)
	for i := range aggs {
		aggs[i] = startProc(t, fmt.Sprintf("aggregator-%d", i), bins.aggregator, dir, append([]string{
			"--aggregator.addr", addr(), "--aggregator.flush_interval", "200ms",
			"--aggregator.instance_id", fmt.Sprintf("agg-%d", i), "--aggregator.session_timeout", "3s",
			"--aggregator.dedupe_window", dedupeWindow.String(), "--aggregator.dedupe_grace", dedupeGrace.String()}, conns...)...)
	}

	// Chaos while the load runs: SIGKILL a random aggregator every 1-3 s and restart it after a
	// short pause; restart the infrastructure once, half-way.
	var posted atomic.Int64
	stopChaos := make(chan struct{})
	chaosDone := make(chan int)
	go func() {
		rng := rand.New(rand.NewPCG(42, 1))
		kills, infraRestarted := 0, false
		defer func() { chaosDone <- kills }()
		for {
			select {
			case <-stopChaos:
				if kills >= eoMinKills {
					return
				}
			case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
			}
			if !infraRestarted && posted.Load() > int64(n/2) {
				infraRestarted = true
				t.Logf("restarting infra (broker and ClickHouse) after %d events", posted.Load())
				if err := infra.stop(syscall.SIGTERM, 30*time.Second); err != nil {
					t.Errorf("stop infra: %v", err)
				}
				if err := infra.start(); err != nil {
					t.Errorf("restart infra: %v", err)
					return
				}
				continue
			}
			p := aggs[rng.IntN(len(aggs))]
			_ = p.stop(syscall.SIGKILL, 10*time.Second)
			kills++
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
			if err := p.start(); err != nil {
				t.Errorf("restart %s: %v", p.name, err)
				return
			}
		}
	}()

	t0 := time.Now()
	if err := postEvents(ctx, "http://"+apiAddr, n, &posted); err != nil {
		t.Fatal(err)
	}
	t.Logf("posted %d events in %s", n, time.Since(t0).Round(time.Millisecond))
	close(stopChaos)
	kills := <-chaosDone
	if kills < eoMinKills {
		t.Fatalf("got %d aggregator kills; want at least %d", kills, eoMinKills)
	}
	t.Logf("aggregators killed %d times", kills)

	// Wait until the checkpoints in ClickHouse reach the end of every partition.
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := kgo.NewClient(kafka.ClientOptions([]string{kafkaAddr}, "oracle", logger, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, schemas.TopicViews)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := chclient.Open(ctx, chclient.Options{Addr: chAddr, Database: "tally", Username: "default"})
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
	testinfra.WaitForEvery(t, 4*time.Minute, 200*time.Millisecond, "aggregators catch up", func() (bool, string) {
		for _, q := range checkpoints {
			got, err := partitionOffsets(ctx, conn, q)
			if err != nil {
				return false, err.Error()
			}
			behind := ""
			ends.Each(func(o kadm.ListedOffset) {
				if got[o.Partition] < o.Offset {
					behind = fmt.Sprintf("partition %d at %d of %d (%s)", o.Partition, got[o.Partition], o.Offset, q)
				}
			})
			if behind != "" {
				return false, behind
			}
		}
		return true, ""
	})
	t.Logf("caught up %s after the last post", time.Since(t0).Round(time.Millisecond))

	oracle := computeOracle(t, ctx, cl, ends)
	t.Logf("oracle: %d records, %d counted views over %d items", oracle.records, oracle.counted, len(oracle.items))
	if oracle.records < int64(n) {
		t.Fatalf("got %d records in the log; want at least the %d posted", oracle.records, n)
	}

	t.Run("every (item, second) total", func(t *testing.T) {
		rows, err := conn.Query(ctx, "SELECT item_id, toInt64(toUnixTimestamp(second)), sum(views) FROM view_deltas WHERE item_id != '' GROUP BY 1, 2")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[secondKey]uint64{}
		for rows.Next() {
			var k secondKey
			var v uint64
			if err := rows.Scan(&k.item, &k.second, &v); err != nil {
				t.Fatal(err)
			}
			got[k] = v
		}
		compareMaps(t, "(item, second)", got, oracle.seconds)
	})
	for _, table := range []string{"views_total", "views_by_minute", "views_by_hour", "views_by_day"} {
		t.Run("every item total in "+table, func(t *testing.T) {
			rows, err := conn.Query(ctx, "SELECT item_id, sum(views) FROM "+table+" GROUP BY item_id")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			got := map[string]uint64{}
			for rows.Next() {
				var item string
				var v uint64
				if err := rows.Scan(&item, &v); err != nil {
					t.Fatal(err)
				}
				got[item] = v
			}
			compareMaps(t, "item", got, oracle.items)
		})
	}
	t.Run("unique viewers within HyperLogLog error", func(t *testing.T) {
		for _, item := range []string{"item-hot", "item-1", "item-2"} {
			var est uint64
			if err := conn.QueryRow(ctx, "SELECT argMax(viewers, updated_at) FROM unique_viewers WHERE item_id = ? AND day = toDate(0)", item).Scan(&est); err != nil {
				t.Fatal(err)
			}
			want := float64(len(oracle.viewers[item]))
			if math.Abs(float64(est)-want) > 0.03*want+3 {
				t.Errorf("%s: got %d unique viewers; want %.0f within 3%%", item, est, want)
			}
		}
	})
	if coll.exited() {
		t.Error("collector exited during the test (its log follows)")
	}
}

// postEvents posts n generated views as NDJSON batches from several goroutines, retrying a
// batch (same bytes, so same event ids) until it is accepted.
func postEvents(ctx context.Context, api string, n int, posted *atomic.Int64) error {
	batches := make(chan []byte, eoPosters)
	errs := make(chan error, eoPosters)
	var wg sync.WaitGroup
	for range eoPosters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 60 * time.Second}
			for b := range batches {
				for attempt := 0; ; attempt++ {
					resp, err := client.Post(api+"/v1/events", "application/x-ndjson", bytes.NewReader(b))
					if err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusAccepted && !bytes.Contains(body, []byte(`"rejected":[{`)) {
							posted.Add(int64(bytes.Count(b, []byte{'\n'})))
							break
						}
						if resp.StatusCode != http.StatusServiceUnavailable {
							errs <- fmt.Errorf("post batch: got %d %s; want 202 with no rejection", resp.StatusCode, body[:min(len(body), 300)])
							return
						}
					}
					if ctx.Err() != nil || attempt > 600 {
						errs <- fmt.Errorf("post batch: gave up after %d attempts: %v", attempt, err)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	gen := newEventGen(n)
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		e := gen.next()
		fmt.Fprintf(&buf, `{"type":"view","item_id":%q,"viewer_id":%q,"event_id":%q,"ts":%d}`+"\n", e.ItemID, e.ViewerID, e.EventID, e.TS)
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
type eventGen struct {
	rng    *rand.Rand
	i, n   int
	base   int64
	recent []schemas.View
}

func newEventGen(n int) *eventGen {
	return &eventGen{rng: rand.New(rand.NewPCG(7, 7)), n: n, base: time.Now().Add(-120 * time.Minute).UnixMilli()}
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
		last      map[string]int64
		next      int64
	}
	parts := map[int32]*state{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		parts[o.Partition] = &state{watermark: math.MinInt64, last: map[string]int64{}}
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
			v, err := schemas.DecodeView(r.Value)
			if err != nil {
				t.Fatalf("oracle: decode record: %v", err)
			}
			if res.viewers[v.ItemID] == nil {
				res.viewers[v.ItemID] = map[string]struct{}{}
			}
			res.viewers[v.ItemID][v.ViewerID] = struct{}{}
			st.watermark = max(st.watermark, v.TS)
			key := v.ViewerID + "\x00" + v.ItemID
			last, seen := st.last[key]
			counts := false
			switch {
			case !seen || last < st.watermark-horizon:
				counts = true
				st.last[key] = v.TS
			case v.TS-last >= window || last-v.TS >= window:
				counts = true
				st.last[key] = max(last, v.TS)
			}
			if counts {
				res.counted++
				res.seconds[secondKey{v.ItemID, int64(math.Floor(float64(v.TS) / 1000))}]++
				res.items[v.ItemID]++
			}
		})
	}
	return res
}

func compareMaps[K comparable](t *testing.T, what string, got, want map[K]uint64) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if g := got[k]; g != w {
			if bad < 10 {
				t.Errorf("%s %v: got %d; want %d", what, k, g, w)
			}
			bad++
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			if bad < 10 {
				t.Errorf("%s %v: got %d; want none", what, k, g)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d %s totals differ", bad, len(want), what)
	}
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
