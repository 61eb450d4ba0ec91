package views

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// dropAndRepair drops table and re-creates it empty from the migrations' DDL, as the
// aggregator's schema check (migrate.Repair) does after a table was dropped by hand.
func dropAndRepair(ctx context.Context, conn driver.Conn, table string) error {
	if err := conn.Exec(ctx, "DROP TABLE "+table); err != nil {
		return fmt.Errorf("drop %s: %w", table, err)
	}
	repaired, err := migrate.Repair(ctx, conn, infra.Logger)
	if err != nil {
		return fmt.Errorf("re-create %s: %w", table, err)
	}
	if !slices.Contains(repaired, table) {
		return fmt.Errorf("re-create %s: got %v re-created; want it among them", table, repaired)
	}
	return nil
}

// itemsOf returns n item ids prefix0, prefix1... that the producer's partitioner places in
// partition p of parts.
func itemsOf(p, parts int, prefix string, n int) []string {
	part := kgo.StickyKeyPartitioner(nil).ForTopic(schemas.TopicViews)
	var items []string
	for j := 0; len(items) < n; j++ {
		id := fmt.Sprint(prefix, j)
		if part.Partition(&kgo.Record{Key: []byte(id)}, parts) == p {
			items = append(items, id)
		}
	}
	return items
}

// flushRefusingRollups flushes a while views_total_by_day refuses every write, the last of the
// rollups a statement fills (the others take theirs), and wants the flush to fail; then the
// table takes writes again.
func flushRefusingRollups(t *testing.T, ctx context.Context, conn driver.Conn, a *Aggregator) {
	t.Helper()
	if err := conn.Exec(ctx, "ALTER TABLE views_total_by_day ADD CONSTRAINT refuse_all CHECK item_id = ''"); err != nil {
		t.Fatal(err)
	}
	stuck, stop := context.WithTimeout(ctx, 3*time.Second)
	_, err := flushViews(a, stuck)
	stop()
	if err == nil {
		t.Fatal("got a flush without error while views_total_by_day refuses writes; want its rollups failing")
	}
	if err := conn.Exec(ctx, "ALTER TABLE views_total_by_day DROP CONSTRAINT refuse_all"); err != nil {
		t.Fatal(err)
	}
}

// roundRobin returns the offsets and records of n views from offset *next on, of items in turn,
// each by a viewer of its own, all at ts (Unix milliseconds), and moves *next past them.
func roundRobin(items []string, next *int64, n int, ts int64) ([]int64, [][]byte) {
	offs := make([]int64, n)
	vals := make([][]byte, n)
	for j := range n {
		offs[j] = *next
		vals[j] = view(items[j%len(items)], fmt.Sprintf("v%d", *next), ts)
		*next++
	}
	return offs, vals
}

// readyEvents records what happens to the Redis totals' ready marker (keyspace notifications),
// so that a test can tell that readers were sent to ClickHouse for a while.
type readyEvents struct {
	mu     sync.Mutex
	events []string
}

func watchReady(t *testing.T, ctx context.Context, rdb *redis.Client) *readyEvents {
	t.Helper()
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "K$g").Err(); err != nil {
		t.Fatal(err)
	}
	sub := rdb.Subscribe(ctx, "__keyspace@0__:t1:{views}:ready")
	if _, err := sub.Receive(ctx); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	ev := &readyEvents{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.Channel() {
			ev.mu.Lock()
			ev.events = append(ev.events, m.Payload)
			ev.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		sub.Close()
		<-done
	})
	return ev
}

// since returns the events from index i on.
func (e *readyEvents) since(i int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events[min(i, len(e.events)):])
}

func (e *readyEvents) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.events)
}

// The epoch of a partition is the newest claim in partition_claims plus one. When that table
// is emptied (truncated, or dropped and re-created by the schema check) while Redis keeps its
// guards, or the whole database is re-created, the next epochs would start below the Redis
// guard: every apply and catch-up is refused, yet the ready marker stays and readers get stale
// totals for good. The new owner must take an epoch above every store's, and have Redis
// rebuilt from ClickHouse, telling readers to wait meanwhile.
func TestRedisTotalsRebuiltWhenClaimsAreLost(t *testing.T) {
	tests := []struct {
		name string
		lose func(ctx context.Context, conn driver.Conn, db string) error
	}{
		{"partition_claims truncated", func(ctx context.Context, conn driver.Conn, _ string) error {
			return conn.Exec(ctx, "TRUNCATE TABLE partition_claims")
		}},
		{"partition_claims dropped and re-created", func(ctx context.Context, conn driver.Conn, _ string) error {
			return dropAndRepair(ctx, conn, "partition_claims")
		}},
		{"the database re-created empty", func(ctx context.Context, conn driver.Conn, db string) error {
			for _, q := range []string{"DROP DATABASE " + db, "CREATE DATABASE " + db} {
				if err := conn.Exec(ctx, q); err != nil {
					return fmt.Errorf("%s: %w", q, err)
				}
			}
			_, err := migrate.Apply(ctx, conn, infra.Logger)
			return err
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db := fmt.Sprintf("views_claims_lost_%d", i)
			conn := openMigrated(t, ctx, db)
			rdb := freshRedis(t, ctx)
			ready := watchReady(t, ctx, rdb)
			clock := time.Now().UTC().Truncate(time.Second)
			now := func() time.Time { return clock }
			const parts = 2
			items := itemsOf(0, parts, "lost-claims-", 4)
			var reg *prometheus.Registry
			newAgg := func() *Aggregator {
				reg = prometheus.NewRegistry()
				a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
					MaxBatch: 1000, SketchIdle: time.Minute, Totals: totals.New(rdb, "views")}, conn, now, infra.Logger, reg)
				a.SetPartitions(parts)
				if _, err := assignViews(a, ctx, []int32{0, 1}); err != nil {
					t.Fatal(err)
				}
				return a
			}
			next := int64(0)
			post := func(a *Aggregator, n int) {
				t.Helper()
				offs, vals := roundRobin(items, &next, n, clock.UnixMilli())
				processAt(a, 0, offs, vals)
				clock = clock.Add(time.Second)
				if _, err := flushViews(a, ctx); err != nil {
					t.Fatal(err)
				}
				settle(t, a)
			}
			// differs says how Redis (what the API reads) differs from ClickHouse's totals.
			differs := func() string {
				ch, err := (&store{conn: conn}).itemTotals(ctx, items)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for j, n := range redisViews(t, ctx, rdb, "views", items) {
					if n != ch[items[j]] {
						out = append(out, fmt.Sprintf("%s: %d in redis, %d in clickhouse", items[j], n, ch[items[j]]))
					}
				}
				return strings.Join(out, "; ")
			}

			// Three owners in turn: Redis's guard of partition 0 holds epoch 3.
			var a *Aggregator
			for _, n := range []int{30, 20, 10} {
				a = newAgg()
				post(a, n)
			}
			if d := differs(); d != "" {
				t.Fatalf("before the loss: %s", d)
			}
			g, err := totals.New(rdb, "views").Guard(ctx, 0)
			if err != nil || g.Epoch != 3 {
				t.Fatalf("got redis guard %+v, %v; want epoch 3", g, err)
			}

			if err := tt.lose(ctx, conn, db); err != nil {
				t.Fatal(err)
			}
			mark := ready.len()
			b := newAgg()
			if got := heldPart(b, 0).epoch; got <= g.Epoch {
				t.Errorf("got epoch %d after the loss; want above %d, redis's guard", got, g.Epoch)
			}
			if got := metricValue(t, reg, "tally_views_epoch_disagreements_total"); got != 2 {
				t.Errorf("got %v epoch disagreements; want 2 (both partitions' redis guards above every claim)", got)
			}
			post(b, 15)
			// Within a bounded time (a few sketch intervals) Redis holds ClickHouse's totals.
			for range 5 {
				if differs() == "" {
					break
				}
				clock = clock.Add(time.Second)
				post(b, 1)
			}
			if d := differs(); d != "" {
				t.Errorf("after the loss and the next owner's flushes: %s", d)
			}
			// Readers were sent to ClickHouse meanwhile: the marker was removed, then set again.
			testinfra.WaitFor(t, 10*time.Second, "the ready marker removed and set again", func() (bool, string) {
				ev := ready.since(mark)
				del := slices.Index(ev, "del")
				return del >= 0 && slices.Contains(ev[del:], "set"), fmt.Sprintf("events %v", ev)
			})
			ok, err := totals.New(rdb, "views").Ready(ctx)
			if err != nil || !ok {
				t.Errorf("got ready %v, %v at the end; want the marker set", ok, err)
			}

			// The next owner after that follows on as usual.
			c := newAgg()
			post(c, 7)
			if d := differs(); d != "" {
				t.Errorf("after one more owner: %s", d)
			}
		})
	}
}

// rollupBuckets returns every non-zero rollup bucket, "table item bucket" -> views.
func rollupBuckets(t *testing.T, ctx context.Context, conn driver.Conn) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, r := range rollups() {
		rows, err := conn.Query(ctx, fmt.Sprintf("SELECT item_id, toString(%[1]s), toInt64(sum(views)) FROM %[2]s GROUP BY item_id, %[1]s", r.column, r.table))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var item, b string
			var n int64
			if err := rows.Scan(&item, &b, &n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				out[r.table+" "+item+" "+b] = n
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// When view_deltas loses rows (dropped and re-created by the schema check, or truncated), the
// rollups still hold the views of the batches it lost. A repair sets each bucket of a batch's
// items to the deltas in it, so repairing the buckets of an item with lost batches would take
// their views away (for up to the deltas' 7 days). The repair must leave such buckets as they
// are, and still repair the items whose deltas are whole.
func TestRollupRepairKeepsBucketsWhoseDeltasWereLost(t *testing.T) {
	tests := []struct {
		name string
		lose func(ctx context.Context, conn driver.Conn) error
		// restart: the owner is replaced after the loss, and the rollups of the next batch are
		// lost before the owner after that repairs them; otherwise the owner keeps running and
		// the rollup write of its next batch fails half way, so that it repairs them.
		restart bool
	}{
		{"dropped and re-created, then restarts", func(ctx context.Context, conn driver.Conn) error {
			return dropAndRepair(ctx, conn, "view_deltas")
		}, true},
		{"truncated, then restarts", func(ctx context.Context, conn driver.Conn) error {
			return conn.Exec(ctx, "TRUNCATE TABLE view_deltas")
		}, true},
		{"dropped and re-created under a running owner", func(ctx context.Context, conn driver.Conn) error {
			return dropAndRepair(ctx, conn, "view_deltas")
		}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			conn := openMigrated(t, ctx, fmt.Sprintf("views_deltas_lost_%d", i))
			clock := time.Now().UTC().Truncate(time.Second)
			now := func() time.Time { return clock }
			cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
				MaxBatch: 1000, SketchIdle: time.Minute}
			const part = int32(0)
			var reg *prometheus.Registry
			newAgg := func() *Aggregator {
				reg = prometheus.NewRegistry()
				a := New(cfg, conn, now, infra.Logger, reg)
				if _, err := assignViews(a, ctx, []int32{part}); err != nil {
					t.Fatal(err)
				}
				return a
			}
			// process gives a the views of offsets from..from+n of items, spread over an hour and
			// a half before now, so that they fill several buckets of each rollup.
			process := func(a *Aggregator, from, n int, items ...string) {
				offs := make([]int64, n)
				vals := make([][]byte, n)
				for j := range n {
					offs[j] = int64(from + j)
					vals[j] = view(items[j%len(items)], fmt.Sprintf("v%d", from+j), clock.Add(-time.Duration(j)*3*time.Minute).UnixMilli())
				}
				processAt(a, part, offs, vals)
			}
			flush := func(a *Aggregator) {
				t.Helper()
				clock = clock.Add(cfg.FlushInterval)
				if _, err := flushViews(a, ctx); err != nil {
					t.Fatal(err)
				}
			}
			kept := []string{"kept-a", "kept-b"}
			a := newAgg()
			process(a, 0, 30, kept...)
			flush(a)
			process(a, 30, 30, kept...)
			flush(a)
			before := rollupBuckets(t, ctx, conn)
			if err := tt.lose(ctx, conn); err != nil {
				t.Fatal(err)
			}

			// The next batch holds views of the kept items and of an item the lost batches never
			// had; its rollups are then lost (in part), and repaired.
			if tt.restart {
				a = newAgg()
				process(a, 60, 30, "kept-a", "kept-b", "fresh")
				flush(a)
				// Lose that batch's rollup rows, as a ClickHouse killed mid-flush would.
				for _, r := range rollups() {
					q := fmt.Sprintf(`INSERT INTO %s SELECT item_id, %s, -toInt64(sum(views)) FROM view_deltas
						WHERE item_id != '' AND partition = ? GROUP BY item_id, %[2]s`, r.table, r.expr)
					if err := conn.Exec(ctx, q, uint16(part)); err != nil {
						t.Fatal(err)
					}
				}
				a = newAgg() // repairs the rollups of the batches its marker does not vouch for
			} else {
				process(a, 60, 30, "kept-a", "kept-b", "fresh")
				clock = clock.Add(cfg.FlushInterval)
				flushRefusingRollups(t, ctx, conn, a)
				flush(a) // the rollups owed are repaired from the deltas
			}

			after := rollupBuckets(t, ctx, conn)
			for k, was := range before {
				if after[k] < was {
					t.Errorf("%s: got %d views after the repair; want at least the %d it held before view_deltas lost rows", k, after[k], was)
				}
			}
			// The item whose deltas are whole is repaired to exactly its deltas.
			checkRollups(t, ctx, conn, "fresh", 10)
			if got := metricValue(t, reg, "tally_views_rollup_repairs_refused_total"); got == 0 {
				t.Errorf("got %v rollup buckets refused; want some (the kept items' buckets differ from their deltas)", got)
			}
		})
	}
}
