package views

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// Redis's item totals equal ClickHouse's after each flush, after a crash between the ClickHouse
// write and the Redis apply (the next owner applies the batch once), after Redis lost everything
// (rebuilt from ClickHouse, and readers told to wait until then, also when it happens under a
// correction after a zombie), and after an outage of Redis alone (caught up from ClickHouse at
// a later flush).
func TestRedisTotalsFollowClickHouse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_totals_test")
	rdb := freshRedis(t, ctx)
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	const parts = 2
	items := itemsOf(0, parts, "tot-", 3)
	newAgg := func(r *redis.Client) *Aggregator {
		a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
			MaxBatch: 1000, SketchIdle: time.Minute, Totals: totals.New(r, "views")}, conn, now, infra.Logger, prometheus.NewRegistry())
		a.SetPartitions(parts)
		if _, err := assignViews(a, ctx, []int32{0, 1}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	next := int64(0)
	post := func(a *Aggregator, n int) {
		offs, vals := roundRobin(items, &next, n, clock.UnixMilli())
		processAt(a, 0, offs, vals)
		clock = clock.Add(time.Second)
		if _, err := flushViews(a, ctx); err != nil {
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

	// Redis loses the writes of the last flush it acknowledged (a failover to a replica they
	// had not reached): the next flush finds the guard behind and catches up from ClickHouse
	// rather than applying on top.
	snap := dumpRedis(t, ctx, rdb)
	post(b, 8)
	restoreRedis(t, ctx, rdb, snap)
	post(b, 5)
	check("after redis lost its last writes", true)

	// Redis comes back empty: readers wait, the owner rebuilds at its next flush.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	post(b, 9)
	check("after a rebuild", true)

	// Redis comes back empty while the owner corrects one item after undoing a zombie's batch:
	// the correction must not put the partition's guard back over the lost totals (the ready
	// marker would then be set over a partition holding that one item); the partition is
	// rebuilt whole.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.fixTotals(ctx, heldPart(b, 0), items[:1]); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Second) // the sketch interval passes: the other partition is rebuilt
	post(b, 4)
	check("after a correction into an emptied redis", true)

	// Redis unreachable for a while: counting in ClickHouse goes on, Redis catches up later.
	// The sketch write beside the loop reads the totals store too: it ends before each swap.
	swapTotals := func(tot *totals.Store) {
		t.Helper()
		if err := b.settleSketches(true); err != nil {
			t.Fatal(err)
		}
		b.tot = tot
	}
	swapTotals(totals.New(down, "views"))
	post(b, 6)
	post(b, 6)
	swapTotals(totals.New(rdb, "views"))
	clock = clock.Add(time.Second) // the sketch interval passes: idle partitions catch up too
	post(b, 3)
	check("after an outage of redis", true)
}

// dumpRedis returns every key of rdb serialized (DUMP), for restoreRedis.
func dumpRedis(t *testing.T, ctx context.Context, rdb *redis.Client) map[string]string {
	t.Helper()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if out[k], err = rdb.Dump(ctx, k).Result(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// restoreRedis makes rdb hold exactly snap again.
func restoreRedis(t *testing.T, ctx context.Context, rdb *redis.Client, snap map[string]string) {
	t.Helper()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range snap {
		if err := rdb.Restore(ctx, k, 0, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A batch's views are readable (Redis) once its deltas are stored, before its rollups: while
// the rollup tables refuse every write the flush fails, yet Redis holds the batch; once they
// take writes again, the rollups are repaired from the deltas and equal Redis.
func TestBatchReadableBeforeItsRollups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_readable_test")
	rdb := freshRedis(t, ctx)
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 5 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute, Totals: totals.New(rdb, "views")}, conn, now, infra.Logger, prometheus.NewRegistry())
	a.SetPartitions(1)
	if _, err := assignViews(a, ctx, []int32{0}); err != nil {
		t.Fatal(err)
	}
	items := []string{"readable-a", "readable-b", "readable-c"}
	want := map[string]int64{}
	offs := make([]int64, 30)
	vals := make([][]byte, 30)
	for i := range offs {
		offs[i] = int64(i)
		vals[i] = view(items[i%len(items)], fmt.Sprintf("v%d", i), clock.UnixMilli())
		want[items[i%len(items)]]++
	}
	processAt(a, 0, offs, vals)
	clock = clock.Add(time.Second)
	flushRefusingRollups(t, ctx, conn, a)
	for i, n := range redisViews(t, ctx, rdb, "views", items) {
		if n != want[items[i]] {
			t.Errorf("%s: got %d views in redis with the rollups unwritable; want %d (the stored deltas)", items[i], n, want[items[i]])
		}
	}

	clock = clock.Add(5 * time.Second) // the sketch interval: the rollups behind are repaired
	if _, err := flushViews(a, ctx); err != nil {
		t.Fatal(err)
	}
	ch, err := (&store{conn: conn}).itemTotals(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range redisViews(t, ctx, rdb, "views", items) {
		if ch[items[i]] != n || n != want[items[i]] {
			t.Errorf("%s: got %d views in the rollups and %d in redis after they were repaired; want %d in both", items[i], ch[items[i]], n, want[items[i]])
		}
	}
}

// freshRedis returns a client of the test Redis, emptied, closed when t ends.
func freshRedis(t *testing.T, ctx context.Context) *redis.Client {
	t.Helper()
	rdb := redisclient.Open(infra.Redis.Addr())
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return rdb
}

// redisViews reads the views of items from the Redis totals called name.
func redisViews(t *testing.T, ctx context.Context, rdb *redis.Client, name string, items []string) []int64 {
	t.Helper()
	pipe := rdb.Pipeline()
	res := totals.New(rdb, name).Queue(ctx, pipe, items)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	views, _, _, err := res()
	if err != nil {
		t.Fatal(err)
	}
	return views
}

// The rollups receive the batches written since their last write once every RollupInterval,
// half an interval out of step with the sketch writes (first at half an interval from the
// start), while Redis has each batch at its flush. A Redis that lost its data while the rollups
// lag is rebuilt from the rollups, brought up to the checkpoint first; a crash loses the rollups
// the aggregator held, and the next owner repairs them from the deltas.
func TestRollupsFollowAtTheirInterval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_rollup_interval_test")
	rdb := freshRedis(t, ctx)
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	newAgg := func() *Aggregator {
		a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
			RollupInterval: 5 * time.Second, MaxBatch: 1000, SketchIdle: time.Minute, Totals: totals.New(rdb, "views")},
			conn, now, infra.Logger, prometheus.NewRegistry())
		a.SetPartitions(1)
		if _, err := assignViews(a, ctx, []int32{0}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	const item = "rollup-interval"
	next := 0
	post := func(a *Aggregator) {
		t.Helper()
		processViews(a, 0, item, next, 10, clock)
		next += 10
		clock = clock.Add(time.Second)
		if _, err := flushViews(a, ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, rolled int64) {
		t.Helper()
		got := rollupTotals(t, ctx, conn, item)
		if got["view_deltas"] != int64(next) {
			t.Errorf("%s: got %d views in view_deltas; want %d", step, got["view_deltas"], next)
		}
		for _, table := range []string{"views_by_minute", "views_by_hour", "views_by_day", "views_total"} {
			if got[table] != rolled {
				t.Errorf("%s: got %d views in %s; want %d", step, got[table], table, rolled)
			}
		}
		if v := redisViews(t, ctx, rdb, "views", []string{item})[0]; v != int64(next) {
			t.Errorf("%s: got %d views in redis; want %d", step, v, next)
		}
	}

	a := newAgg()
	post(a)
	post(a)
	check("before the rollup slot", 0)
	clock = clock.Add(time.Second)
	post(a) // at 4 s, past the first slot (2.5 s); the next is at 7.5 s
	check("at the rollup slot", 30)
	post(a)
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	post(a)
	check("after redis was rebuilt while the rollups lagged", 50)

	post(a) // then a crash: the rollups of 30-60 are lost with the process
	b := newAgg()
	check("after the next owner's assignment", 60)
	post(b)
	check("before the next owner's first rollup slot", 60)
	clock = clock.Add(5 * time.Second)
	post(b)
	check("at the next owner's rollup slot", 80)
}

// A flush's readable time runs from the previous flush's start, before which the oldest view of
// its batch may have been consumed, to its Redis apply; without Redis totals nothing becomes
// readable and nothing is observed.
func TestReadableSecondsFromThePreviousFlushStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_readable_test")
	rdb := freshRedis(t, ctx)
	tests := []struct {
		name      string
		partition int32
		totals    *totals.Store
		wantCount uint64
	}{
		{"with redis totals", 0, totals.New(rdb, "views"), 1},
		{"without redis totals", 1, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Now().UTC().Truncate(time.Second)
			now := func() time.Time { return clock }
			reg := prometheus.NewRegistry()
			a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Minute,
				MaxBatch: 1000, SketchIdle: time.Minute, Totals: tt.totals}, conn, now, infra.Logger, reg)
			if _, err := assignViews(a, ctx, []int32{tt.partition}); err != nil {
				t.Fatal(err)
			}
			processAt(a, tt.partition, []int64{0}, [][]byte{view("readable", "v", clock.UnixMilli())})
			clock = clock.Add(3 * time.Second)
			if _, err := flushViews(a, ctx); err != nil {
				t.Fatal(err)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var count uint64
			var sum float64
			for _, mf := range mfs {
				if mf.GetName() == "tally_views_readable_seconds" {
					count, sum = mf.GetMetric()[0].GetHistogram().GetSampleCount(), mf.GetMetric()[0].GetHistogram().GetSampleSum()
				}
			}
			if count != tt.wantCount || count > 0 && sum < 3 {
				t.Errorf("got %d observations summing %.3f s; want %d of at least 3 s (the time since the previous flush's start)", count, sum, tt.wantCount)
			}
		})
	}
}

// Redis loses its data at random ones of the aggregator's Redis calls (inside a rebuild
// between its chunks, a catch-up, a batch's apply, a correction after a zombie, or between
// them), twice a round, round after round: within two flushes after the last, Redis holds
// exactly the views posted and is marked ready; it is never marked ready over partial totals.
// The seed is logged.
func TestRedisTotalsSurviveALossAnywhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_totals_loss_test")
	rdb := freshRedis(t, ctx)
	hook := testinfra.FlushAllWith(rdb)
	lossy := redisclient.Open(infra.Redis.Addr())
	defer lossy.Close()
	lossy.AddHook(hook)
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	const parts = 2
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
		MaxBatch: 100_000, SketchIdle: time.Minute, Totals: totals.New(lossy, "views")}, conn, now, infra.Logger, prometheus.NewRegistry())
	a.SetPartitions(parts)
	if _, err := assignViews(a, ctx, []int32{0, 1}); err != nil {
		t.Fatal(err)
	}
	// Partition 0's 1,500 items make a rebuild of two chunks (totals.ChunkItems).
	items := [parts][]string{itemsOf(0, parts, "loss-", 1500), itemsOf(1, parts, "loss-", 200)}
	all := append(slices.Clone(items[0]), items[1]...)
	want := map[string]int64{}
	var next [parts]int64
	post := func(p, n int) {
		offs, vals := roundRobin(items[p], &next[p], n, clock.UnixMilli())
		for i := range offs {
			want[items[p][i%len(items[p])]]++
		}
		processAt(a, int32(p), offs, vals)
	}
	flush := func() {
		t.Helper()
		clock = clock.Add(time.Second) // a flush and a sketch interval: the totals check runs
		if _, err := flushViews(a, ctx); err != nil {
			t.Fatal(err)
		}
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	losses, calls := 0, int64(10)
	for round := range 12 {
		// Two losses at calls among as many as the last round made: the second may come inside
		// what the first set off (a rebuild, a catch-up).
		hook.Arm(1+rng.Int64N(calls), 1+rng.Int64N(calls))
		post(0, 1+rng.IntN(3000))
		post(1, 1+rng.IntN(300))
		flush()
		if rng.IntN(2) == 0 {
			// A correction after undoing a zombie's batch, of some of partition 0's items.
			if err := a.settleSketches(true); err != nil {
				t.Fatal(err)
			}
			if err := a.fixTotals(ctx, heldPart(a, 0), items[0][:1+rng.IntN(len(items[0]))]); err != nil {
				t.Fatal(err)
			}
		}
		flush()
		lost, n := hook.Arm()
		calls = max(n, 1)
		if lost {
			losses++
		}
		flush()
		flush()
		checkWhole(t, ctx, rdb, all, want, fmt.Sprintf("round %d (redis lost its data: %v), two flushes later", round, lost))
	}
	if losses == 0 {
		t.Fatal("got no round in which redis lost its data; want some (the armed call never came)")
	}
	t.Logf("%d of 12 rounds lost redis's data", losses)
}

// checkWhole fails t unless the "views" totals are marked whole and hold want's views of items.
func checkWhole(t *testing.T, ctx context.Context, rdb *redis.Client, items []string, want map[string]int64, when string) {
	t.Helper()
	views, ready := redisViewsReady(t, ctx, rdb, items)
	if !ready {
		t.Fatalf("%s: got ready false; want the totals whole", when)
	}
	for i, it := range items {
		if views[i] != want[it] {
			t.Fatalf("%s: %s: got %d views in redis; want %d", when, it, views[i], want[it])
		}
	}
}

// redisViewsReady reads the views of items and the ready marker from the "views" totals.
func redisViewsReady(t *testing.T, ctx context.Context, rdb *redis.Client, items []string) ([]int64, bool) {
	t.Helper()
	pipe := rdb.Pipeline()
	res := totals.New(rdb, "views").Queue(ctx, pipe, items)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	views, _, ready, err := res()
	if err != nil {
		t.Fatal(err)
	}
	return views, ready
}

// Redis's totals equal ClickHouse's through a zombie (an owner stalled past the session timeout
// that finishes its flush after the next owner's claim): when its apply reaches Redis before the
// next owner's claim does, and when undoing its batch in ClickHouse makes the next owner rebuild
// Redis while the rollups lag the deltas.
func TestRedisTotalsExactThroughAZombie(t *testing.T) {
	tests := []struct {
		name string
		// run drives the zombie and the owner (whose Redis store is set after its claim, when
		// redisAtClaim is false) and checks Redis after its steps.
		run          func(t *testing.T, ctx context.Context, z *zombieRun)
		redisAtClaim bool
	}{
		{name: "the zombie's apply lands before the owner's claim reaches redis", run: zombieAppliesFirst},
		{name: "undoing the zombie's batch rebuilds redis while the rollups lag", run: zombieUndoneIntoARebuild, redisAtClaim: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			conn := openMigrated(t, ctx, fmt.Sprintf("views_totals_zombie_%d_test", i))
			rdb := freshRedis(t, ctx)
			clock := time.Now().UTC().Truncate(time.Second)
			now := func() time.Time { return clock }
			newAgg := func(owner string, tot *totals.Store) *Aggregator {
				a := New(Config{Owner: owner, Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second,
					SketchInterval: time.Hour, RollupInterval: 3 * time.Hour, MaxBatch: 1000, SketchIdle: time.Minute, Totals: tot},
					conn, now, infra.Logger, prometheus.NewRegistry())
				a.SetPartitions(1)
				return a
			}
			store := totals.New(rdb, "views")
			z := &zombieRun{item: "zombie-totals", conn: conn, rdb: rdb, store: store, clock: &clock, zombie: newAgg("zombie", store)}
			z.check = func(step string) {
				t.Helper()
				got := rollupTotals(t, ctx, conn, z.item)["view_deltas"]
				if v := redisViews(t, ctx, rdb, "views", []string{z.item})[0]; v != got {
					t.Errorf("%s: got %d views in redis; want %d as in clickhouse", step, v, got)
				}
			}
			z.assignOwner = func() {
				t.Helper()
				var tot *totals.Store
				if tt.redisAtClaim {
					tot = store
				}
				z.owner = newAgg("owner", tot)
				if _, err := assignViews(z.owner, ctx, []int32{0}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := assignViews(z.zombie, ctx, []int32{0}); err != nil {
				t.Fatal(err)
			}
			z.post(t, ctx, z.zombie, 0, 40)
			tt.run(t, ctx, z)
		})
	}
}

// zombieRun is what the cases of TestRedisTotalsExactThroughAZombie share: one item on
// partition 0, the clock, the zombie and the owner, and the check of Redis against ClickHouse.
type zombieRun struct {
	item          string
	conn          driver.Conn
	rdb           *redis.Client
	store         *totals.Store
	clock         *time.Time
	zombie, owner *Aggregator
	assignOwner   func()
	check         func(step string)
}

// post counts n views of the item at offsets from from and flushes them.
func (z *zombieRun) post(t *testing.T, ctx context.Context, a *Aggregator, from, n int) {
	t.Helper()
	processViews(a, 0, z.item, from, n, *z.clock)
	*z.clock = z.clock.Add(time.Second)
	if _, err := flushViews(a, ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, a)
}

// zombieAppliesFirst: the zombie's statement is dropped past its fence in ClickHouse, yet it
// applies the batch to Redis before the owner's claim reaches Redis. Applying on top of that
// guard would skip the owner's batches up to the zombie's end as already applied.
func zombieAppliesFirst(t *testing.T, ctx context.Context, z *zombieRun) {
	processViews(z.zombie, 0, z.item, 40, 60, *z.clock) // pending when it stalls
	z.assignOwner()
	zp := heldPart(z.zombie, 0)
	if err := z.zombie.store.writeDeltas(ctx, []*partition{zp}, *z.clock); err != nil {
		t.Fatal(err)
	}
	if _, err := z.store.Apply(ctx, 0, zp.epoch, zp.redisEnd, 100, map[string]int64{z.item: 60}); err != nil {
		t.Fatal(err)
	}
	z.owner.tot = z.store
	z.post(t, ctx, z.owner, 40, 30)
	z.check("after the owner's first batch")
	z.post(t, ctx, z.owner, 70, 30)
	z.check("after the owner's batch ending where the zombie's did")
	z.post(t, ctx, z.owner, 100, 5)
	z.check("after the owner's batch past the zombie's")
}

// zombieUndoneIntoARebuild: the zombie's batch commits after the owner's claim; when the owner
// undoes it, Redis lost the owner's last apply (a failover), so the correction rebuilds the
// partition's totals while the rollups lag the owner's batches.
func zombieUndoneIntoARebuild(t *testing.T, ctx context.Context, z *zombieRun) {
	processViews(z.zombie, 0, z.item, 40, 60, *z.clock)
	z.assignOwner()
	z.post(t, ctx, z.owner, 40, 30)
	z.post(t, ctx, z.owner, 70, 30)
	// Redis loses the apply of the owner's next batch.
	snap := dumpRedis(t, ctx, z.rdb)
	z.post(t, ctx, z.owner, 100, 10)
	restoreRedis(t, ctx, z.rdb, snap)
	zp := heldPart(z.zombie, 0)
	parts := []*partition{zp}
	if err := z.zombie.store.writeBatchItems(ctx, parts, *z.clock); err != nil {
		t.Fatal(err)
	}
	if err := z.zombie.store.writeDeltasInto(ctx, "view_deltas", parts, *z.clock); err != nil {
		t.Fatal(err)
	}
	// The check slot (at half the sketch interval, long before the first rollup slot): the owner
	// finds the zombie's batch and undoes it.
	*z.clock = z.clock.Add(31 * time.Minute)
	if _, err := flushViews(z.owner, ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, z.owner)
	z.check("after the zombie's batch was undone")
	if got := rollupTotals(t, ctx, z.conn, z.item); got["views_total"] != 110 {
		t.Errorf("rollups: got %d views; want 110", got["views_total"])
	}
}

// A rebuild cut short leaves its epoch's mark in Redis, which fences every older rebuild; when
// partition_claims lost rows, the next claim must still take an epoch above that mark, or its
// rebuild would be refused for good and readers sent to ClickHouse forever.
func TestClaimTakesAnEpochAboveARebuildCutShort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_rebuild_mark_test")
	rdb := freshRedis(t, ctx)
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	newAgg := func() *Aggregator {
		a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
			MaxBatch: 1000, SketchIdle: time.Minute, Totals: totals.New(rdb, "views")}, conn, now, infra.Logger, prometheus.NewRegistry())
		a.SetPartitions(1)
		if _, err := assignViews(a, ctx, []int32{0}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	const item = "rebuild-mark"
	a := newAgg()
	processViews(a, 0, item, 0, 20, clock)
	clock = clock.Add(time.Second)
	if _, err := flushViews(a, ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, a)
	// A rebuild of epoch 7 was cut short after its first chunk, and the claims table lost the
	// rows of epochs 2 to 7 (the owners of those epochs wrote nothing else).
	guard := "t1:{views}:guard:0"
	if err := rdb.HDel(ctx, guard, "epoch", "end", "chunk").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, guard, "pending", 7).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, "t1:{views}:ready").Err(); err != nil {
		t.Fatal(err)
	}
	b := newAgg()
	if e := heldPart(b, 0).epoch; e <= 7 {
		t.Errorf("epoch of the next claim: got %d; want above the rebuild's 7", e)
	}
	views, _, ready, err := readTotals(ctx, rdb, item)
	if err != nil {
		t.Fatal(err)
	}
	if !ready || views[0] != 20 {
		t.Errorf("redis after the next claim: got %d views, ready %v; want 20, ready", views[0], ready)
	}
}

// readTotals reads items' views and the ready marker from the Redis totals of views.
func readTotals(ctx context.Context, rdb *redis.Client, items ...string) ([]int64, []uint64, bool, error) {
	pipe := rdb.Pipeline()
	res := totals.New(rdb, "views").Queue(ctx, pipe, items)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, false, err
	}
	return res()
}

// The aggregator killed at any of its Redis calls (an apply's chunk, a claim, a rebuild's
// chunk, a repair's), then the next owner claims its partitions: once that owner has flushed,
// Redis's totals are whole again and equal the views counted. The kill stops the aggregator's
// Redis calls there; the rest of its flush reaches ClickHouse, as a kill right after those
// writes would leave it.
func TestRedisTotalsSurviveAKillAnywhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_totals_kill_test")
	rdb := freshRedis(t, ctx)
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	ts := clock.UnixMilli()
	const parts = 2
	// Partition 0's 1,500 items make applies and rebuilds of two chunks (totals.ChunkItems).
	items := [parts][]string{itemsOf(0, parts, "kill-", 1500), itemsOf(1, parts, "kill-", 200)}
	all := append(slices.Clone(items[0]), items[1]...)
	want := map[string]int64{}
	var posted [parts]int64
	// process gives a the records of partition p at offsets [from, to): an offset's record is
	// always the same, so a replay from a checkpoint is what Kafka would replay.
	process := func(a *Aggregator, p int, from, to int64) {
		var offs []int64
		var vals [][]byte
		for off := from; off < to; off++ {
			offs = append(offs, off)
			vals = append(vals, view(items[p][off%int64(len(items[p]))], fmt.Sprintf("v%d-%d", p, off), ts))
		}
		processAt(a, int32(p), offs, vals)
	}
	post := func(a *Aggregator, p, n int) {
		for off := posted[p]; off < posted[p]+int64(n); off++ {
			want[items[p][off%int64(len(items[p]))]]++
		}
		process(a, p, posted[p], posted[p]+int64(n))
		posted[p] += int64(n)
	}
	flush := func(a *Aggregator) {
		t.Helper()
		clock = clock.Add(time.Second) // a flush and a sketch interval: the totals check runs
		if _, err := flushViews(a, ctx); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(c *redis.Client) *Aggregator {
		t.Helper()
		a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
			MaxBatch: 100_000, SketchIdle: time.Minute, Totals: totals.New(c, "views")}, conn, now, infra.Logger, prometheus.NewRegistry())
		a.SetPartitions(parts)
		resume, err := assignViews(a, ctx, []int32{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		for p := range parts {
			process(a, p, resume[int32(p)], posted[p]) // what the last owner had not flushed
		}
		return a
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	kills, calls := 0, int64(20)
	const rounds = 6
	for round := range rounds {
		// Every third round is killed at a random call; the others lose Redis's last applies
		// first, so that a correction rebuilds the partition over the guard left behind, and
		// every third is killed right after that rebuild's first chunk rather than at random.
		lose, cut := round%3 != 0, round%3 == 2
		kill := &killSwitch{atRebuild: cut}
		loss := &testinfra.RedisLoss{Lose: kill.kill}
		c := redisclient.Open(infra.Redis.Addr())
		c.AddHook(kill)
		c.AddHook(loss)
		if !cut {
			loss.Arm(1 + rng.Int64N(calls))
		}
		a := claim(c)
		post(a, 0, 1000+rng.IntN(2000)) // a rebuild of more than one chunk
		post(a, 1, 1+rng.IntN(300))
		var snap map[string]string
		if lose {
			snap = dumpRedis(t, ctx, rdb)
		}
		flush(a)
		if err := a.settleSketches(true); err != nil { // its writes to Redis beside the loop too
			t.Fatal(err)
		}
		if lose {
			restoreRedis(t, ctx, rdb, snap) // a failover to a replica the applies had not reached
		}
		if lose || rng.IntN(2) == 0 {
			// A correction after undoing a zombie's batch, of some of partition 0's items.
			_ = a.fixTotals(ctx, heldPart(a, 0), items[0][:1+rng.IntN(len(items[0]))]) // fails once killed
		}
		post(a, 0, 1+rng.IntN(3000))
		flush(a)
		if err := a.settleSketches(true); err != nil {
			t.Fatal(err)
		}
		dead, n := loss.Arm()
		if !cut {
			calls = max(n, 1)
		}
		dead = dead || kill.dead.Load()
		if dead {
			kills++
		}
		c.Close() // a is gone, killed or not

		b := claim(rdb)
		flush(b)
		flush(b)
		if err := b.settleSketches(true); err != nil {
			t.Fatal(err)
		}
		checkWhole(t, ctx, rdb, all, want, fmt.Sprintf("round %d (killed: %v), after the next owner's flushes", round, dead))
	}
	if kills == 0 {
		t.Fatal("got no round killed at a redis call; want some (the armed call never came)")
	}
	t.Logf("%d of %d rounds killed at a redis call", kills, rounds)
}

// killSwitch is a go-redis hook that refuses every call once kill was called, or, with
// atRebuild, once a rebuild's first chunk was written: the calls of a process that was killed
// never reach Redis.
type killSwitch struct {
	dead      atomic.Bool
	atRebuild bool
}

func (k *killSwitch) kill() { k.dead.Store(true) }

func (k *killSwitch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k *killSwitch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k.dead.Load() {
			cmd.SetErr(killed{})
			return killed{}
		}
		err := next(ctx, cmd)
		if k.atRebuild && beginsRebuild(cmd) {
			k.kill()
		}
		return err
	}
}

// beginsRebuild reports whether cmd ran the first chunk of a totals rebuild: a script whose
// second argument (after its keys) is a rebuild step beginning with "b" (totals.Store.Set).
func beginsRebuild(cmd redis.Cmder) bool {
	args := cmd.Args()
	if name := strings.ToLower(fmt.Sprint(args[0])); len(args) < 3 || name != "evalsha" && name != "eval" {
		return false
	}
	keys, err := strconv.Atoi(fmt.Sprint(args[2]))
	if i := 3 + keys + 1; err == nil && i < len(args) {
		return strings.HasPrefix(fmt.Sprint(args[i]), "b")
	}
	return false
}

func (k *killSwitch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if k.dead.Load() {
			for _, c := range cmds {
				c.SetErr(killed{})
			}
			return killed{}
		}
		return next(ctx, cmds)
	}
}

// killed is the error of a call refused by a killSwitch.
type killed struct{}

func (killed) Error() string { return "the process was killed" }
