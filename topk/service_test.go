package topk

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
	"github.com/tallypipeline/tally/topk/tracker"
)

var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

const partitions = 4

// workload publishes what aggregators would: batches of (key, second, count) per source
// partition with growing ends, some published twice (a catch-up after a crash), one cut short
// after its first chunk and then published whole, and a record that is not a counted record.
type workload struct {
	rng  *rand.Rand
	zipf *rand.Zipf
	cl   *kgo.Client
	// epoch is this workload's claim on every partition: the tests of this package share one
	// counted topic, so each workload writes under an epoch above the ones before it, as a
	// new aggregator would, and no batch identity stands for two different batches.
	epoch uint64
	ends  [partitions]int64
	sent  [][]schemas.Counted // every batch published, for republishing
}

func newWorkload(t *testing.T) *workload {
	cl, err := kgo.NewClient(append(kafka.ClientOptions([]string{infra.Kafka.Addr()}, "test-counted", infra.Logger, nil),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafka.EnsureTopics(ctx, cl, partitions, schemas.TopicCounted); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(42, uint64(time.Now().UnixNano())))
	return &workload{rng: rng, zipf: rand.NewZipf(rng, 1.1, 1, 3000), cl: cl, epoch: uint64(time.Now().UnixNano())}
}

func (w *workload) produce(t *testing.T, recs ...schemas.Counted) {
	t.Helper()
	for _, c := range recs {
		r := &kgo.Record{Topic: schemas.TopicCounted, Partition: c.Batch.Partition, Key: []byte(schemas.CountedKey(c.Kind, c.Batch.Partition)), Value: schemas.AppendCounted(nil, c)}
		if err := w.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// batch makes the next batch of a random partition: pairs distinct (key, second) counts, most
// within the last hour, a third within the last 50 seconds.
func (w *workload) batch(pairs int) []schemas.Counted {
	p := int32(w.rng.IntN(partitions))
	kind := schemas.CountKinds[w.rng.IntN(2)]
	now := time.Now().Unix()
	seen := map[string]bool{}
	var counts []schemas.BucketCount
	for len(counts) < pairs {
		sec := now - w.rng.Int64N(55*60)
		if w.rng.IntN(3) == 0 {
			sec = now - w.rng.Int64N(50)
		}
		key := fmt.Sprintf("k%d", w.zipf.Uint64())
		if seen[fmt.Sprint(key, sec)] {
			continue
		}
		seen[fmt.Sprint(key, sec)] = true
		counts = append(counts, schemas.BucketCount{Key: key, Second: sec, Count: uint64(1 + w.rng.IntN(5))})
	}
	start := w.ends[p]
	w.ends[p] += int64(10 + w.rng.IntN(100))
	recs := schemas.CountedRecords(kind, schemas.BatchID{Partition: p, Epoch: w.epoch, Start: start, End: w.ends[p]}, counts)
	w.sent = append(w.sent, recs)
	return recs
}

// run publishes n batches, republishing an earlier one now and then.
func (w *workload) run(t *testing.T, n int) {
	t.Helper()
	for range n {
		w.produce(t, w.batch(20+w.rng.IntN(150))...)
		if w.rng.IntN(8) == 0 {
			w.produce(t, w.sent[w.rng.IntN(len(w.sent))]...)
		}
	}
}

// cutShort publishes a two-chunk batch's first chunk, then the whole batch.
func (w *workload) cutShort(t *testing.T) {
	recs := w.batch(schemas.MaxCountedChunk + 100)
	w.produce(t, recs[0])
	w.produce(t, recs...)
}

// oracle is the exact list of kind over [from, to) from every counted pair the log holds
// (after the guard rule), sorted by count descending, then key ascending.
func oracle(log []schemas.Counted, kind string, from, to time.Time, k int) []schemas.TopEntry {
	sum := map[string]uint64{}
	for _, c := range log {
		if c.Kind.String() != kind {
			continue
		}
		for _, e := range c.Counts {
			if e.Second >= from.Unix() && e.Second < to.Unix() {
				sum[e.Key] += e.Count
			}
		}
	}
	out := make([]schemas.TopEntry, 0, len(sum))
	for key, n := range sum {
		out = append(out, schemas.TopEntry{Key: key, Count: n})
	}
	slices.SortFunc(out, func(a, b schemas.TopEntry) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	out = out[:min(k, len(out))]
	for i := range out {
		out[i].Rank = i + 1
	}
	return out
}

// applied returns the chunks the guard rule keeps, read from the whole log.
func applied(t *testing.T) []schemas.Counted {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return infra.AppliedCounted(t, ctx, nil)
}

// redisLists reads every published list, or nil if one is missing or older than since.
func redisLists(t *testing.T, rdb redis.UniversalClient, since time.Time) []schemas.TopList {
	t.Helper()
	var out []schemas.TopList
	for _, k := range schemas.CountKinds {
		for _, w := range schemas.TopWindows {
			b, err := rdb.Get(context.Background(), schemas.TopRedisKey(k, w)).Bytes()
			if err == redis.Nil {
				return nil
			}
			if err != nil {
				t.Fatal(err)
			}
			var l schemas.TopList
			if err := json.Unmarshal(b, &l); err != nil {
				t.Fatal(err)
			}
			if l.ComputedAt.Before(since) {
				return nil
			}
			out = append(out, l)
		}
	}
	return out
}

// matchLog reports whether the published lists are the log's: 1m and 1h equal to the oracle
// over their stated ranges, every 24h count within its stated bound.
func matchLog(log []schemas.Counted, lists []schemas.TopList) (bool, string) {
	if lists == nil {
		return false, "no fresh lists in redis"
	}
	for _, l := range lists {
		want := oracle(log, l.Kind, l.From, l.To, schemas.MaxTopK)
		if l.Exact {
			if !slices.Equal(l.Entries, want) {
				return false, fmt.Sprintf("%s %s [%s, %s): got %d entries %v; want %d %v", l.Kind, l.Window, l.From, l.To,
					len(l.Entries), l.Entries[:min(3, len(l.Entries))], len(want), want[:min(3, len(want))])
			}
			continue
		}
		truth := map[string]uint64{}
		for _, e := range oracle(log, l.Kind, l.From, l.To, 1<<30) {
			truth[e.Key] = e.Count
		}
		if l.ErrorBound == nil {
			return false, fmt.Sprintf("%s %s: no error bound", l.Kind, l.Window)
		}
		for _, e := range l.Entries {
			if d := max(e.Count, truth[e.Key]) - min(e.Count, truth[e.Key]); d > *l.ErrorBound {
				return false, fmt.Sprintf("%s %s: %s got %d, true %d; want within %d", l.Kind, l.Window, e.Key, e.Count, truth[e.Key], *l.ErrorBound)
			}
		}
		if len(l.Entries) == 0 && len(truth) > 0 {
			return false, fmt.Sprintf("%s %s: empty list; the log has %d keys", l.Kind, l.Window, len(truth))
		}
	}
	return true, ""
}

// The service in-process: the lists it publishes to Redis equal the log's; the compacted topk
// topic and topk_snapshots receive them; Stop ends every goroutine it started and leaves a
// snapshot.
func TestServicePublishesTheLogsLists(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newWorkload(t)
	w.run(t, 100)
	w.cutShort(t)
	if err := w.cl.ProduceSync(ctx, &kgo.Record{Topic: schemas.TopicCounted, Partition: 1, Value: []byte("not a counted record")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out := outputs(t, ctx, "topk_service_test")
	rdb, conn, prod := out.Redis, out.ClickHouse, out.Kafka
	snap := filepath.Join(t.TempDir(), "snapshot")
	started := time.Now()
	svc := startService(t, ctx, out, snap)
	log := applied(t)
	testinfra.WaitFor(t, 30*time.Second, "lists equal to the log's", func() (bool, string) {
		return matchLog(log, redisLists(t, rdb, started))
	})
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snap); err != nil {
		t.Errorf("after Stop: %v; want a snapshot", err)
	}
	var rows uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM topk_snapshots WHERE rank <= 10").Scan(&rows); err != nil || rows == 0 {
		t.Errorf("topk_snapshots: got %d rows, %v; want some", rows, err)
	}
	ends, err := kadm.NewClient(prod).ListEndOffsets(ctx, schemas.TopicTopK)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(schemas.TopicTopK, 0); o.Offset < 6 {
		t.Errorf("topic %s: got %d records; want at least one per kind and window", schemas.TopicTopK, o.Offset)
	}
}

// outputs are a tracker's outputs for a test: the test Redis (flushed), a producer of the topk
// topic, and database db with the migrations applied; closed when the test ends.
func outputs(t *testing.T, ctx context.Context, db string) *Outputs {
	t.Helper()
	conn := infra.DB(t, ctx, db)
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(kafka.ClientOptions([]string{infra.Kafka.Addr()}, "test-topk-out", infra.Logger, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	if err := EnsureTopKTopic(ctx, prod, kafka.Durability{}); err != nil {
		t.Fatal(err)
	}
	return &Outputs{Redis: rdb, Kafka: prod, ClickHouse: conn, HistoryK: 10}
}

// startService starts a tracker on the test's counted topic, publishing every 100 ms to out and
// snapshotting to snap every second.
func startService(t *testing.T, ctx context.Context, out *Outputs, snap string) *Service {
	t.Helper()
	svc, err := New(ctx, Config{Brokers: []string{infra.Kafka.Addr()}, Partitions: partitions, PublishInterval: 100 * time.Millisecond,
		SnapshotInterval: time.Second, SnapshotPath: snap, Tracker: tracker.Options{Shards: 8, Counters: 256}, ColdReplay: 25 * time.Hour},
		out, time.Now, infra.Logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	svc.Start()
	return svc
}

// Two copies of the tracker (the Kubernetes default) each read every partition and publish
// the same lists to the same outputs; with one stopped, the other alone keeps the lists fresh
// and equal to the log as counts go on arriving.
func TestTwoCopiesPublishTheSameLists(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newWorkload(t)
	w.run(t, 60)
	out := outputs(t, ctx, "topk_two_copies_test")
	rdb := out.Redis
	copies := []*Service{
		startService(t, ctx, out, filepath.Join(t.TempDir(), "snapshot")),
		startService(t, ctx, out, filepath.Join(t.TempDir(), "snapshot")),
	}
	started := time.Now()
	log := applied(t)
	testinfra.WaitFor(t, 30*time.Second, "both copies' lists equal to the log's", func() (bool, string) {
		return matchLog(log, redisLists(t, rdb, started))
	})
	if err := copies[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	w.run(t, 40)
	log = applied(t)
	testinfra.WaitFor(t, 30*time.Second, "the other copy's lists equal to the longer log's", func() (bool, string) {
		return matchLog(log, redisLists(t, rdb, stopped))
	})
	if err := copies[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// kill -9 of the topk process while counts arrive, then more counts (some published again),
// then a restart: the 1m and 1h lists equal the lists computed from the log, and the 24h
// counts stay within their bound.
func TestKillNineThenListsEqualTheLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := testinfra.Build(t.TempDir(), "github.com/tallypipeline/tally/topk/cmd/topk")
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkload(t)
	w.run(t, 50)
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	defer rdb.Close()
	data := t.TempDir()
	admin, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, time.Time) {
		at := time.Now()
		cmd := exec.Command(bin, "--data_dir", data, "--kafka.brokers", infra.Kafka.Addr(), "--kafka.partitions", fmt.Sprint(partitions),
			"--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword, "--clickhouse.database", "topk_kill_test", "--redis.addr", infra.Redis.Addr(),
			"--topk.addr", admin, "--topk.publish_interval", "200ms", "--topk.snapshot_interval", "1s", "--topk.day_counters", "256")
		f, err := os.OpenFile(filepath.Join(data, "topk.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			f.Close()
			if t.Failed() {
				t.Logf("--- topk log:\n%s", testinfra.LogTail(filepath.Join(data, "topk.log"), 4000))
			}
		})
		return cmd, at
	}
	cmd, at := start()
	testinfra.WaitFor(t, time.Minute, "first lists equal to the log's", func() (bool, string) {
		return matchLog(applied(t), redisLists(t, rdb, at))
	})
	testinfra.WaitFor(t, 10*time.Second, "a snapshot", func() (bool, string) {
		_, err := os.Stat(filepath.Join(data, "topk", "snapshot"))
		return err == nil, fmt.Sprint(err)
	})
	w.run(t, 50)
	w.cutShort(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	w.run(t, 50)
	for range 20 { // a crashed aggregator's catch-up publishes batches topk may have applied
		w.produce(t, w.sent[w.rng.IntN(len(w.sent))]...)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	_, at = start()
	log := applied(t)
	testinfra.WaitFor(t, time.Minute, "lists after kill -9 equal to the log's", func() (bool, string) {
		return matchLog(log, redisLists(t, rdb, at))
	})
	b, _ := os.ReadFile(filepath.Join(data, "topk.log"))
	if !strings.Contains(string(b), "topk state restored") {
		t.Errorf("restart did not restore the snapshot; log:\n%s", testinfra.LogTail(filepath.Join(data, "topk.log"), 2000))
	}
}
