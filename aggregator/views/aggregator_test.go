package views

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/schemas/viewerhours"
	"github.com/tallypipeline/tally/schemas/viewersketch"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process).
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

// openMigrated opens an empty database db with every migration applied.
func openMigrated(t *testing.T, ctx context.Context, db string) driver.Conn {
	t.Helper()
	conn := infra.DB(t, ctx, db)
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	return conn
}

// hourSketch estimates item's unique viewers from its stored hour sketches (migration 022),
// and fails t unless the union of its stored minute sketches (migration 023) estimates the same.
func hourSketch(t *testing.T, ctx context.Context, conn driver.Conn, item string) uint64 {
	t.Helper()
	var regs, ranks []uint16
	var keys []uint32
	var minuteRanks []uint16
	if err := conn.QueryRow(ctx, `SELECT h.1, arrayMap(x -> toUInt16(x), h.2), m.1, arrayMap(x -> toUInt16(x), m.2) FROM
		(SELECT maxMap(registers) AS h, maxMap(minutes) AS m FROM unique_viewers_by_hour WHERE item_id = ?)`, item).Scan(&regs, &ranks, &keys, &minuteRanks); err != nil {
		t.Fatal(err)
	}
	var r, minutes viewerhours.Registers
	for i := range regs {
		r.Set(regs[i], uint8(ranks[i]))
	}
	for i, k := range keys {
		_, reg, _ := viewerhours.SplitKey(k)
		minutes.Set(reg, uint8(minuteRanks[i]))
	}
	if got, want := minutes.Estimate(), r.Estimate(); got != want {
		t.Errorf("%s: got %d unique viewers over its minutes; want %d, as over its hours", item, got, want)
	}
	return r.Estimate()
}

// viewersSketch is the estimate of an hour sketch of the viewers prefix0 to prefix(n-1).
func viewersSketch(prefix string, n int) uint64 {
	var r viewerhours.Registers
	for i := range n {
		r.Add(viewerHash(prefix + strconv.Itoa(i)))
	}
	return r.Estimate()
}

// queryUint runs q, which returns one unsigned number.
func queryUint(t *testing.T, ctx context.Context, conn driver.Conn, q string, args ...any) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// A crash after a deltas flush but before the next sketch write loses the sketches' newest
// viewers in memory; the next owner resumes at the sketch checkpoint, replays them into the
// sketches only, and counts nothing twice.
func TestCrashBetweenSketchWritesReplaysIntoSketchesOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_sketch_test")
	clock := testinfra.RecentNoon()
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 10 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	query := func(q string, args ...any) uint64 { t.Helper(); return queryUint(t, ctx, conn, q, args...) }
	tests := []struct {
		name       string
		partition  int32
		sketchedAt int64 // records before this offset are flushed once the sketch interval passed
	}{
		{"crash after a sketch write", 0, 50},
		{"crash before any sketch write", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := fmt.Sprintf("item-%d", tt.partition)
			offsets := make([]int64, 100)
			values := make([][]byte, 100)
			for i := range offsets {
				offsets[i] = int64(i)
				values[i] = view(item, fmt.Sprintf("viewer-%d", i), clock.UnixMilli())
			}
			uniques := func() uint64 {
				return query("SELECT max(viewers) FROM unique_viewers_latest WHERE item_id = ? AND day = toDate(0)", item)
			}
			sketchCheckpoint := func() uint64 {
				return query("SELECT toUInt64(max(end_offset)) FROM sketch_checkpoints WHERE partition = ?", uint16(tt.partition))
			}
			// The hour's sketch (written with the deltas) holds exactly the first n viewers.
			byHour := func(n int) {
				t.Helper()
				if got, want := hourSketch(t, ctx, conn, item), viewersSketch("viewer-", n); got != want {
					t.Errorf("got an hour sketch estimating %d viewers; want %d, that of the first %d", got, want, n)
				}
			}
			first := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
			if resume, err := assignViews(first, ctx, []int32{tt.partition}); err != nil || len(resume) != 0 {
				t.Fatalf("got resume %v, %v; want none (no checkpoint yet)", resume, err)
			}
			if tt.sketchedAt > 0 {
				processAt(first, tt.partition, offsets[:tt.sketchedAt], values[:tt.sketchedAt])
				clock = clock.Add(cfg.SketchInterval) // deltas and sketches
				if _, err := flushViews(first, ctx); err != nil {
					t.Fatal(err)
				}
				settle(t, first)
			}
			processAt(first, tt.partition, offsets[tt.sketchedAt:], values[tt.sketchedAt:])
			clock = clock.Add(cfg.FlushInterval) // deltas alone
			if _, err := flushViews(first, ctx); err != nil {
				t.Fatal(err)
			}
			// first crashes here: the viewers from sketchedAt on are counted but in no stored sketch.
			if got := sketchCheckpoint(); got != uint64(tt.sketchedAt) {
				t.Errorf("got sketch checkpoint %d; want %d", got, tt.sketchedAt)
			}
			if got := uniques(); got != uint64(tt.sketchedAt) {
				t.Errorf("got %d unique viewers stored before the crash; want %d", got, tt.sketchedAt)
			}
			byHour(int(tt.sketchedAt))

			second := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
			resume, err := assignViews(second, ctx, []int32{tt.partition})
			if err != nil || resume[tt.partition] != tt.sketchedAt {
				t.Fatalf("got resume %v, %v; want partition %d at %d (the sketch checkpoint)", resume, err, tt.partition, tt.sketchedAt)
			}
			processAt(second, tt.partition, offsets[tt.sketchedAt:], values[tt.sketchedAt:])
			done, err := flushAllViews(second, ctx)
			if err != nil || len(done) != 0 {
				t.Fatalf("got deltas written %v, %v; want none (the replay was counted before)", done, err)
			}
			if got := query("SELECT toUInt64(sum(views)) FROM views_total WHERE item_id = ?", item); got != 100 {
				t.Errorf("got %d views; want 100", got)
			}
			if got := uniques(); got != 100 {
				t.Errorf("got %d unique viewers after the replay; want 100", got)
			}
			byHour(100)
			if got := sketchCheckpoint(); got != 100 {
				t.Errorf("got sketch checkpoint %d; want 100", got)
			}
		})
	}
}

// Tables written before sketches had their own checkpoint hold sketches complete up to the
// deltas checkpoint (they were written in every flush): migration 003 seeds sketch_checkpoints
// from the deltas markers, so an upgraded aggregator does not replay its whole log into them.
func TestMigrationSeedsSketchCheckpointsFromDeltas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := infra.DB(t, ctx, "views_upgrade_test")
	all, err := migrate.Load()
	if err != nil {
		t.Fatal(err)
	}
	// run applies the migrations keep selects, as an upgrade's first Apply runs them.
	run := func(keep func(version uint32) bool) (ran bool) {
		for _, m := range all {
			if !keep(m.Version) {
				continue
			}
			for _, stmt := range m.Statements {
				if err := conn.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			ran = ran || m.Version == 3
		}
		return ran
	}
	run(func(v uint32) bool { return v < 3 }) // the tables of an older version
	// Its deltas markers: two flushes of partition 4, one of partition 5.
	for _, m := range []struct {
		partition uint16
		end       int64
	}{{4, 70}, {4, 120}, {5, 30}} {
		if err := conn.Exec(ctx, "INSERT INTO view_deltas (partition, end_offset, watermark, item_id, second, views) VALUES (?, ?, now64(), '', now(), 0)", m.partition, m.end); err != nil {
			t.Fatal(err)
		}
	}
	if !run(func(v uint32) bool { return v >= 3 }) {
		t.Fatal("got no migration 003; want the one creating sketch_checkpoints")
	}
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 5 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}, conn, time.Now, infra.Logger, prometheus.NewRegistry())
	resume, err := assignViews(a, ctx, []int32{4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int32]int64{4: 120, 5: 30}; fmt.Sprint(resume) != fmt.Sprint(want) {
		t.Errorf("got resume %v; want %v (the deltas checkpoints; partition 6 has none)", resume, want)
	}
}

// The first sketch write after an assignment loads the stored version of every item the
// partition touched; with many long item ids that is more than one query's worth of text.
func TestFirstSketchWriteOfManyLongItems(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_long_items_test")
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 5 * time.Second,
		MaxBatch: 100000, SketchIdle: time.Minute}, conn, time.Now, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(a, ctx, []int32{9}); err != nil {
		t.Fatal(err)
	}
	n := chclient.MaxListItems + 2000
	offsets := make([]int64, n)
	values := make([][]byte, n)
	ts := time.Now().UnixMilli()
	for i := range n {
		id := fmt.Sprintf("long-%d-", i)
		offsets[i] = int64(i)
		values[i] = view(id+strings.Repeat("x", schemas.MaxIDLen-len(id)), "viewer", ts)
	}
	processAt(a, 9, offsets, values)
	// ClickHouse errors are retried until ctx ends, so a write that cannot succeed fails here.
	wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
	defer wcancel()
	if _, err := flushAllViews(a, wctx); err != nil {
		t.Fatal(err)
	}
	var rows uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM unique_viewer_deltas WHERE startsWith(item_id, 'long-')").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != uint64(2*n) {
		t.Errorf("got %d sketch delta rows; want %d (a day and an all-time sketch per item)", rows, 2*n)
	}
}

// A stop while ClickHouse is failing ends within its deadline: the last flush gives up and drops
// what is pending (the next owner replays it), and so do the group callbacks (a revoke's writes,
// an assignment's state load), which otherwise retry with a context that only ends once the
// client is closed, while closing waits for them.
func TestStopWithClickHouseFailingIsBounded(t *testing.T) {
	tests := []struct {
		name      string
		rebalance bool // a second member joins while ClickHouse fails, before the stop
	}{
		{"last flush fails", false},
		{"during a rebalance", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := fmt.Sprintf("views_stop_test_%d", i)
			group := fmt.Sprintf("views-stop-test-%d", i)
			conn := openMigrated(t, ctx, db)
			var firstAgg *Aggregator
			start := func() *member.Source {
				// No flush before the stop: everything processed is still pending then.
				agg := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Hour, SketchInterval: time.Hour,
					MaxBatch: 100000, SketchIdle: time.Minute}, conn, time.Now, infra.Logger, prometheus.NewRegistry())
				if firstAgg == nil {
					firstAgg = agg
				}
				src, err := NewSource(testMember(group, conn, infra.Logger), agg)
				if err != nil {
					t.Fatal(err)
				}
				src.Start()
				return src
			}
			first := start()
			prod := infra.Producer(t, schemas.TopicViews, 2)
			for i := range 10 {
				v := schemas.View{ItemID: fmt.Sprintf("stop-%d", i), ViewerID: "v", TS: time.Now().UnixMilli()}
				if err := prod.ProduceSync(ctx, &kgo.Record{Topic: schemas.TopicViews, Key: []byte(v.ItemID), Value: schemas.AppendView(nil, v)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			testinfra.WaitFor(t, 30*time.Second, "records processed", func() (bool, string) {
				n := 0
				firstAgg.Each(func(p *partition) { n += p.records })
				return n > 0, fmt.Sprintf("%d processed", n)
			})
			if err := conn.Exec(ctx, "DROP DATABASE "+db); err != nil {
				t.Fatal(err)
			}
			sources := []*member.Source{first}
			if tt.rebalance {
				sources = append(sources, start())
				time.Sleep(2 * time.Second) // the join starts a rebalance; its callbacks now retry
			}
			stopped := make(chan error, len(sources))
			for _, src := range sources {
				go func() {
					sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer scancel()
					stopped <- src.Stop(sctx)
				}()
			}
			deadline := time.After(30 * time.Second)
			for range sources {
				select {
				case err := <-stopped:
					if !tt.rebalance && err == nil {
						t.Error("got a clean stop; want the failed last flush reported")
					}
				case <-deadline:
					t.Fatal("stop still running 30 s after a 2 s deadline")
				}
			}
		})
	}
}

// A repeat of an older counted view of a pair, arriving after a newer window of the pair opened,
// is a duplicate: every counted view still held is checked, not only the newest. The same holds
// after a restart, whose window is restored from dedupe_batches with every held counted view.
func TestRepeatOfAnOlderCountedViewCountsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_held_test")
	clock := testinfra.RecentNoon()
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 10 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	t0 := clock.UnixMilli()
	min := time.Minute.Milliseconds()
	records := []struct {
		ts     int64
		counts bool
	}{
		{t0, true},
		{t0 + 35*min, true},  // a newer window opens; t0 is still held (watermark - 40m = t0 - 5m)
		{t0, false},          // an exact retry of the older counted view
		{t0 + 5*min, false},  // a repeat inside the older window
		{t0 + 35*min, false}, // an exact retry of the newest
	}
	tests := []struct {
		name      string
		partition int32
		restartAt int // records before this index are flushed and the aggregator restarts; 0: none
	}{
		{"in one run", 12, 0},
		{"restart between the two counted views", 13, 1},
		{"restart after the two counted views", 14, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := fmt.Sprintf("held-%d", tt.partition)
			a := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
			if _, err := assignViews(a, ctx, []int32{tt.partition}); err != nil {
				t.Fatal(err)
			}
			want := uint64(0)
			for i, r := range records {
				if i == tt.restartAt && i > 0 {
					if _, err := flushAllViews(a, ctx); err != nil {
						t.Fatal(err)
					}
					a = New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
					resume, err := assignViews(a, ctx, []int32{tt.partition})
					if err != nil || resume[tt.partition] != int64(i) {
						t.Fatalf("got resume %v, %v; want partition %d at %d", resume, err, tt.partition, i)
					}
				}
				processAt(a, tt.partition, []int64{int64(i)}, [][]byte{view(item, "v", r.ts)})
				if r.counts {
					want++
				}
			}
			if _, err := flushAllViews(a, ctx); err != nil {
				t.Fatal(err)
			}
			var got uint64
			if err := conn.QueryRow(ctx, "SELECT sum(views) FROM view_deltas WHERE item_id = ?", item).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("got %d views of %s; want %d (the two counted views, each once)", got, item, want)
			}
		})
	}
}

// A sketch interval stores only the viewers seen since the last one (a delta, with the whole
// sketch's estimate), not the whole sketch. The deltas an owner leaves unfolded when its
// partition moves are folded into unique_viewers by the next owner, even for items it never
// sees: once the deltas' TTL drops them, the whole sketch alone must hold every viewer.
func TestSketchDeltasAreFoldedByTheNextOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_sketch_fold_test")
	clock := testinfra.RecentNoon()
	now := func() time.Time { return clock }
	const part = int32(40)
	const item = "fold-item"
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 2 * time.Second,
		FoldInterval: 2 * time.Second, MaxBatch: 1000, SketchIdle: time.Minute}
	query := func(q string, args ...any) uint64 { t.Helper(); return queryUint(t, ctx, conn, q, args...) }
	assign := func() *Aggregator {
		a := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
		if _, err := assignViews(a, ctx, []int32{part}); err != nil {
			t.Fatal(err)
		}
		return a
	}
	// Handed over by a revoke: its deltas are written, not folded.
	revoke := func(a *Aggregator) {
		if _, err := a.Revoke(ctx, []int32{part}); err != nil {
			t.Fatal(err)
		}
	}
	first := assign()
	processViews(first, part, item, 0, 100, clock)
	revoke(first)
	second := assign()
	processAt(second, part, []int64{100, 101}, [][]byte{view(item, "v99", clock.UnixMilli()), view(item, "v100", clock.UnixMilli())})
	revoke(second)
	deltas := func(q string) uint64 {
		return query(q+" FROM unique_viewer_deltas WHERE item_id = ? AND day = toDate(0)", item)
	}
	if got := deltas("SELECT count()"); got != 2 {
		t.Fatalf("got %d all-time deltas; want 2, one per owner", got)
	}
	var blob string
	if err := conn.QueryRow(ctx, "SELECT sketch FROM unique_viewer_deltas WHERE item_id = ? AND day = toDate(0) AND end_offset = 102", item).Scan(&blob); err != nil {
		t.Fatal(err)
	}
	sk, err := viewersketch.Decode([]byte(blob))
	if err != nil {
		t.Fatal(err)
	}
	if got, whole := sk.Estimate(), deltas("SELECT max(viewers)"); got != 2 || whole != 101 {
		t.Errorf("got the second delta holding %d viewers with an estimate of %d; want 2 (v99, v100) and 101", got, whole)
	}
	if got := query("SELECT count() FROM unique_viewers WHERE item_id = ?", item); got != 0 {
		t.Fatalf("got %d whole sketches before any fold; want 0", got)
	}
	third := assign() // never sees the item
	clock = clock.Add(cfg.SketchInterval)
	if _, err := flushViews(third, ctx); err != nil {
		t.Fatal(err)
	}
	if got := query("SELECT toUInt64(max(end_offset)) FROM sketch_folds WHERE partition = ?", uint16(part)); got != 102 {
		t.Errorf("got fold checkpoint %d; want 102", got)
	}
	// The TTL drops the deltas; the fourth owner loads the whole sketch alone.
	if err := conn.Exec(ctx, "TRUNCATE TABLE unique_viewer_deltas"); err != nil {
		t.Fatal(err)
	}
	revoke(third)
	fourth := assign()
	processViews(fourth, part, item, 102, 1, clock) // v102
	clock = clock.Add(cfg.SketchInterval)
	if _, err := flushViews(fourth, ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, fourth)
	if got := query("SELECT viewers FROM unique_viewers_latest WHERE item_id = ? AND day = toDate(0)", item); got != 102 {
		t.Errorf("got %d unique viewers; want 102 (v0-v100, v102)", got)
	}
}

// A sketch new to memory loads the stored deltas of the keys an earlier owner left unfolded
// alone (partition.inherited); this owner's own deltas keep their sketch in memory until its
// fold, and the fold's whole sketch holds them. So a sketch folded, evicted while idle and seen
// again starts from the whole sketch: its next delta's estimate counts every viewer, old and
// new, with the deltas of the first viewers still in unique_viewer_deltas and not asked for.
func TestSketchEvictedAfterItsFoldComesBackWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_sketch_evicted_test")
	clock := testinfra.RecentNoon()
	const part = int32(44)
	const item = "evicted-item"
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 2 * time.Second,
		FoldInterval: 2 * time.Second, MaxBatch: 1000, SketchIdle: time.Second}
	a := New(cfg, conn, func() time.Time { return clock }, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(a, ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	p := heldPart(a, part)
	if p.inherited != nil {
		t.Fatalf("got %d inherited keys on a fresh partition; want none", len(p.inherited))
	}
	// Each interval another item takes a view, so that sketch writes (which evict) go on.
	next := 0
	interval := func() {
		t.Helper()
		processAt(a, part, []int64{int64(next)}, [][]byte{view("other-item", fmt.Sprint(next), clock.UnixMilli())})
		next++
		clock = clock.Add(cfg.SketchInterval)
		if _, err := flushViews(a, ctx); err != nil {
			t.Fatal(err)
		}
		settle(t, a)
	}
	views := func(n int) {
		processViews(a, part, item, next, n, clock)
		next += n
	}
	views(50)
	for range 4 { // the delta, its fold, and idle past SketchIdle
		interval()
	}
	if sk := p.sketches[sketchKey{item, allTime}]; sk != nil {
		t.Fatalf("got the sketch of %s in memory (unfolded %v); want it evicted", item, sk.unfolded)
	}
	views(10)
	interval()
	got := queryUint(t, ctx, conn, "SELECT argMax(viewers, written_at) FROM unique_viewer_deltas WHERE item_id = ? AND day = toDate(0)", item)
	if got != 60 {
		t.Errorf("got an estimate of %d viewers after the sketch came back; want 60 (v0-v59)", got)
	}
}

// An estimate skipped while a large sketch took new viewers is written once it is due, also
// when the item has no new views by then, or at once when the partition is revoked: a burst's
// last viewers are not left out of the figure until the item's fold.
func TestSkippedEstimateWrittenWhenDue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_estimate_test")
	clock := testinfra.RecentNoon()
	const part = int32(41)
	const item = "burst-item"
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 5 * time.Second,
		MaxBatch: 10000, SketchIdle: time.Hour}, conn, func() time.Time { return clock }, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(a, ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	p := heldPart(a, part)
	write := func(after time.Duration) {
		t.Helper()
		clock = clock.Add(after)
		if err := a.writeSketches(ctx, []*partition{p}, clock, false); err != nil {
			t.Fatal(err)
		}
		settle(t, a)
	}
	latest := func() uint64 {
		t.Helper()
		return queryUint(t, ctx, conn, "SELECT argMax(viewers, written_at) FROM unique_viewer_deltas WHERE item_id = ? AND day = toDate(0)", item)
	}
	processViews(a, part, item, 0, 2000, clock)
	write(5 * time.Second)
	first := latest()
	processViews(a, part, item, 2000, 100, clock)
	write(5 * time.Second) // 5% more viewers, but the estimate is 5 s old
	if got := latest(); got != first {
		t.Errorf("got %d after 5 s; want %d (estimate not due yet)", got, first)
	}
	if p.sketchesPending(clock.Add(10*time.Second), false) {
		t.Errorf("got sketches pending 15 s after the last estimate; want none")
	}
	if !p.sketchesPending(clock.Add(estimateEvery), false) {
		t.Fatalf("got no sketches pending once the skipped estimate is due; want them")
	}
	write(estimateEvery)
	if got := latest(); got < 2080 || got > 2120 {
		t.Errorf("got %d unique viewers once due; want about 2,100 (was %d)", got, first)
	}
	// A revoke's write carries the estimate skipped just before: the next owner would leave
	// it stale until the item's fold.
	processViews(a, part, item, 2100, 100, clock)
	write(5 * time.Second)
	clock = clock.Add(time.Second)
	if _, err := a.Revoke(ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	if got := latest(); got < 2180 || got > 2220 {
		t.Errorf("got %d unique viewers after a revoke; want about 2,200", got)
	}
}

// The sketch deltas, the rollups and the checks (zombies, folds) each cost more than a batch;
// they come once per sketch interval, the rollups and the checks half an interval after the
// sketches, so no flush carries all of them.
func TestPeriodicWorkInSeparateFlushes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_slots_test")
	clock := time.Now().UTC().Truncate(time.Second)
	reg := prometheus.NewRegistry()
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: 500 * time.Millisecond,
		SketchInterval: 2 * time.Second, RollupInterval: 2 * time.Second, FoldInterval: 2 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}, conn, func() time.Time { return clock }, infra.Logger, reg)
	if _, err := assignViews(a, ctx, []int32{0}); err != nil {
		t.Fatal(err)
	}
	var sketched, rolled, checked []string
	for i := range 16 {
		processViews(a, 0, "slots", i*10, 10, clock)
		clock = clock.Add(500 * time.Millisecond)
		p := heldPart(a, 0)
		sk, ro, folds := p.sketched, p.rolled, testutil.ToFloat64(a.m.folds)
		if _, err := flushViews(a, ctx); err != nil {
			t.Fatal(err)
		}
		settle(t, a)
		at := fmt.Sprintf("%.1fs", float64(i+1)/2)
		if p.sketched != sk {
			sketched = append(sketched, at)
		}
		if p.rolled != ro {
			rolled = append(rolled, at)
		}
		if testutil.ToFloat64(a.m.folds) != folds {
			checked = append(checked, at)
		}
	}
	for _, tt := range []struct {
		what      string
		got, want []string
	}{
		{"sketch deltas", sketched, []string{"2.0s", "4.0s", "6.0s", "8.0s"}},
		{"rollups", rolled, []string{"1.0s", "3.0s", "5.0s", "7.0s"}},
		// The first check finds nothing to fold: no sketch delta is written before 2 s.
		{"folds", checked, []string{"3.0s", "5.0s", "7.0s"}},
	} {
		if fmt.Sprint(tt.got) != fmt.Sprint(tt.want) {
			t.Errorf("%s written at %v; want at %v", tt.what, tt.got, tt.want)
		}
	}
	// Each flush times the steps it ran, and only those: no Redis totals or counted topic here.
	want := map[string]uint64{"dedupe_state_and_batch_items": 16, "deltas": 16, "claims_check": 16,
		"rollups": 4, "zombie_check": 4, "sketch_deltas": 4, "fold": 4}
	if got := stepCounts(t, reg); !maps.Equal(got, want) {
		t.Errorf("got flush steps timed %v; want %v", got, want)
	}
}

// stepCounts reads how many flushes timed each step (tally_views_flush_step_seconds).
func stepCounts(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "tally_views_flush_step_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	return got
}

// settle waits for a's sketch write under way, if any, and applies its outcome, as a later
// flush does once it is done.
func settle(t *testing.T, a *Aggregator) {
	t.Helper()
	if err := a.settleSketches(true); err != nil {
		t.Fatal(err)
	}
}

// A sketch write beside the loop that its context cut short (a stop while it retried) gives its
// deltas back, and the stop's own flush writes them: a sketch checkpoint never vouches for
// viewers that no stored delta holds.
func TestSketchWriteCutShortIsWrittenAtStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_sketch_cut_test")
	clock := time.Now().UTC().Truncate(time.Second)
	const part = int32(43)
	const item = "cut-short"
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
		MaxBatch: 10000, SketchIdle: time.Hour}, conn, func() time.Time { return clock }, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(a, ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	processViews(a, part, item, 0, 10, clock)
	if _, err := flushAllViews(a, ctx); err != nil { // the sketches loaded: the next write queries nothing first
		t.Fatal(err)
	}
	processViews(a, part, item, 10, 50, clock)
	p := heldPart(a, part)
	ended, end := context.WithCancel(ctx)
	end()
	if err := a.writeSketches(ended, []*partition{p}, clock, false); err != nil {
		t.Fatal(err)
	}
	if _, err := flushAllViews(a, ctx); err != nil {
		t.Fatal(err)
	}
	if p.sketched != 60 {
		t.Errorf("got sketch checkpoint %d in memory; want 60", p.sketched)
	}
	rows, err := conn.Query(ctx, "SELECT sketch FROM unique_viewer_deltas WHERE partition = ? AND item_id = ? AND day = toDate(0) AND end_offset = 60", uint16(part), item)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var blob string
		if err := rows.Scan(&blob); err != nil {
			t.Fatal(err)
		}
		sk, err := viewersketch.Decode([]byte(blob))
		if err != nil {
			t.Fatal(err)
		}
		if got := sk.Estimate(); got != 50 {
			t.Errorf("got %d viewers in the all-time delta written at the stop; want 50", got)
		}
		n++
	}
	if n != 1 {
		t.Errorf("got %d all-time delta rows at offset 60; want 1", n)
	}
	if got, want := hourSketch(t, ctx, conn, item), viewersSketch("v", 60); got != want {
		t.Errorf("got an hour sketch estimating %d viewers; want %d, that of all 60 (the 50 of the cut write given back)", got, want)
	}
}
