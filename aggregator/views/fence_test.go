package views

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/fence"
)

// A ClickHouse server may commit a statement whose check of the claims (inside the statement)
// ran just before a claim. If that owner dies before it looks for zombies' batches, and the next
// owner's checkpoint is already past the batch, the next owner must still find it: it looks back
// over every claim of the last zombieLookback, not only from its own start.
func TestZombieBatchCommittedAfterTwoClaimsIsUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_zombie_lookback_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 2 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	withOwner := func(owner string) Config { c := cfg; c.Owner = owner; return c }
	const part, item = int32(30), "lookback"
	process := func(a *Aggregator, from, n int) { processViews(a, part, item, from, n, clock) }

	zombie := New(withOwner("zombie"), conn, now, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(zombie, ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	process(zombie, 0, 40)
	clock = clock.Add(cfg.SketchInterval)
	if _, err := flushViews(zombie, ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, zombie)
	process(zombie, 40, 60) // its statement for 40-100 is under way when the next owner claims

	first := New(withOwner("first"), conn, now, infra.Logger, prometheus.NewRegistry())
	if resume, err := assignViews(first, ctx, []int32{part}); err != nil || resume[part] != 40 {
		t.Fatalf("got resume %v, %v; want partition %d at 40", resume, err, part)
	}
	process(first, 40, 60)
	clock = clock.Add(cfg.SketchInterval)
	if _, err := flushViews(first, ctx); err != nil { // deltas and sketches to 100; then it dies
		t.Fatal(err)
	}
	settle(t, first)
	clock = clock.Add(time.Minute)
	second := New(withOwner("second"), conn, now, infra.Logger, prometheus.NewRegistry())
	// The second owner also holds a partition without zombies: one statement looks in both,
	// and that partition's batches stay.
	const other, otherItem = int32(31), "lookback-other"
	if resume, err := assignViews(second, ctx, []int32{part, other}); err != nil || resume[part] != 100 {
		t.Fatalf("got resume %v, %v; want partition %d at 100", resume, err, part)
	}
	processViews(second, other, otherItem, 0, 25, clock)
	// The zombie's rows commit now, after both claims.
	zp := []*partition{heldPart(zombie, part)}
	if err := zombie.store.writeBatchItems(ctx, zp, clock); err != nil {
		t.Fatal(err)
	}
	if err := zombie.store.writeDeltasInto(ctx, "view_deltas", zp, clock); err != nil {
		t.Fatal(err)
	}
	if got := rollupTotals(t, ctx, conn, item)["view_deltas"]; got != 160 {
		t.Fatalf("got %d views in the deltas after the zombie's commit; want 160", got)
	}
	clock = clock.Add(cfg.SketchInterval) // the second owner looks for zombies' batches
	if _, err := flushViews(second, ctx); err != nil {
		t.Fatal(err)
	}
	settle(t, second)
	checkRollups(t, ctx, conn, item, 100)
	checkRollups(t, ctx, conn, otherItem, 25)
}

// A claim that finds no checkpoint because the previous owner's first batch lands just after the
// claim's read starts at 0: that batch ends beyond the start, is invalid and undone, so the new
// owner must replay from 0, never from where the previous owner's commit to Kafka put the
// group's offset (the views in between would be counted by nobody). A third claim, made before
// the second owner's first batch lands, finds no checkpoint either; the zombie's invalid
// batches (one landed, one whose items were written before its fenced deltas were dropped) do
// not prove anything counted, so it replays from 0 as well.
func TestClaimWithoutCheckpointReplaysFromItsStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_claim_no_checkpoint_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 2 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	withOwner := func(owner string) Config { c := cfg; c.Owner = owner; return c }
	const part, item = int32(32), "no-checkpoint"

	zombie := New(withOwner("zombie"), conn, now, infra.Logger, prometheus.NewRegistry())
	if resume, err := assignViews(zombie, ctx, []int32{part}); err != nil || len(resume) != 0 {
		t.Fatalf("first claim: got resume %v, %v; want none (kafka's committed offset)", resume, err)
	}
	processViews(zombie, part, item, 0, 40, clock) // its first batch's statement is under way
	for _, owner := range []string{"second", "third"} {
		a := New(withOwner(owner), conn, now, infra.Logger, prometheus.NewRegistry())
		resume, err := assignViews(a, ctx, []int32{part})
		if off, ok := resume[part]; err != nil || !ok || off != 0 {
			t.Fatalf("%s claim without a checkpoint: got resume %v, %v; want partition %d at 0", owner, resume, err, part)
		}
		if owner == "third" {
			processViews(a, part, item, 0, 55, clock)
			clock = clock.Add(cfg.SketchInterval) // the owner finds the zombie's batch and undoes it
			if _, err := flushViews(a, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, a)
			checkRollups(t, ctx, conn, item, 55)
			return
		}
		zp := []*partition{heldPart(zombie, part)} // the zombie's batch commits after the claim
		if err := zombie.store.writeBatchItems(ctx, zp, clock); err != nil {
			t.Fatal(err)
		}
		if err := zombie.store.writeDeltasInto(ctx, "view_deltas", zp, clock); err != nil {
			t.Fatal(err)
		}
		processViews(zombie, part, item, 40, 20, clock) // its next batch: items written, deltas fenced
		if err := zombie.store.writeBatchItems(ctx, zp, clock); err != nil {
			t.Fatal(err)
		}
	}
}

// A displaced owner's sketch or fold checkpoint that lands between a claim's read of the
// checkpoints and its row passes the statement's fence (migration 010), with an offset beyond
// the claim's start. A later claim that finds no deltas checkpoint must not take it as proof that
// batches up to it were written: the claims undid them, and a start above them would leave their
// views counted by nobody. A valid one still vouches (the deltas lost, the sketches kept).
func TestClaimDistrustsARacedSketchCheckpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_raced_sketch_checkpoint_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	tests := []struct {
		name, table string
		byZombie    bool  // the checkpoint's epoch: the displaced owner's, else the second owner's
		want        int64 // where the third claim resumes
	}{
		{"a zombie's sketch checkpoint", "sketch_checkpoints", true, 0},
		{"a zombie's fold checkpoint", "sketch_folds", true, 0},
		{"a valid sketch checkpoint", "sketch_checkpoints", false, 40},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			part, item := int32(40+i), fmt.Sprintf("raced-%d", i)
			claim := func(owner string) (*Aggregator, map[int32]int64) {
				cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second,
					SketchInterval: 2 * time.Second, MaxBatch: 1000, SketchIdle: time.Minute, Owner: owner}
				a := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
				resume, err := assignViews(a, ctx, []int32{part})
				if err != nil {
					t.Fatalf("%s claim: %v", owner, err)
				}
				return a, resume
			}
			zombie, _ := claim("zombie")
			processViews(zombie, part, item, 0, 40, clock) // its batch never lands
			second, resume := claim("second")
			if resume[part] != 0 {
				t.Fatalf("second claim: got resume %v; want partition %d at 0", resume, part)
			}
			// The zombie's checkpoint, as if it had passed the fence before the second claim's
			// row; or the second owner's, whose deltas the table then lost.
			by := second
			if tt.byZombie {
				by = zombie
			}
			q := "INSERT INTO " + tt.table + " (partition, epoch, end_offset, written_at) VALUES (?, ?, 40, now64(3))"
			if err := conn.Exec(ctx, q, uint16(part), heldPart(by, part).Epoch()); err != nil {
				t.Fatal(err)
			}
			third, resume := claim("third")
			if off, ok := resume[part]; !ok || off != tt.want {
				t.Fatalf("third claim without a checkpoint: got resume %v; want partition %d at %d", resume, part, tt.want)
			}
			if tt.want != 0 {
				return
			}
			processViews(third, part, item, 0, 40, clock)
			clock = clock.Add(2 * time.Second)
			if _, err := flushViews(third, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, third)
			checkRollups(t, ctx, conn, item, 40)
		})
	}
}

// rollupTotals returns item -> total per rollup table, and the deltas' total.
// deltaDeletes counts the DELETEs of partition part's rows of view_deltas the engine ran (each a
// mutation of the table).
func deltaDeletes(t *testing.T, ctx context.Context, conn driver.Conn, part int32) int {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, `SELECT count() FROM system.mutations WHERE database = currentDatabase() AND table = 'view_deltas'
		AND position(command, ?) > 0`, fmt.Sprintf("(partition = %d)", part)).Scan(&n); err != nil {
		t.Fatalf("count the deletes of partition %d's deltas: %v", part, err)
	}
	return int(n)
}

func rollupTotals(t *testing.T, ctx context.Context, conn driver.Conn, item string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"view_deltas", "views_by_minute", "views_by_hour", "views_by_day", "views_total_by_day", "views_total"} {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT toInt64(sum(views)) FROM "+table+" WHERE item_id = ?", item).Scan(&n); err != nil {
			t.Fatalf("total of %s in %s: %v", item, table, err)
		}
		out[table] = n
	}
	return out
}

func checkRollups(t *testing.T, ctx context.Context, conn driver.Conn, item string, want int64) {
	t.Helper()
	for table, got := range rollupTotals(t, ctx, conn, item) {
		if got != want {
			t.Errorf("%s: got %d views of %s; want %d", table, got, item, want)
		}
	}
}

// A ClickHouse killed between the deltas INSERT and the rollup INSERTs (or in the middle of
// them) keeps a batch the rollups lack. The batch's marker does not vouch for it, so the next
// owner compares that batch's buckets with the deltas and repairs them, also when the loss is
// partial (one table has the rows, another not) or several tables lack them.
func TestRollupsOfAnUnvouchedBatchAreRepaired(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_rollup_repair_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
		MaxBatch: 1000, SketchIdle: time.Minute, Owner: "test"}
	tests := []struct {
		name   string
		lose   []string // rollup tables whose rows of the last batch are lost
		viewer int      // first viewer of the second batch
	}{
		{"every rollup lost", []string{"views_by_minute", "views_by_hour", "views_total_by_day"}, 0},
		{"only the all-time totals lost", []string{"views_total_by_day"}, 0},
		{"nothing lost", nil, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			part := int32(i)
			item := fmt.Sprintf("repair-%d", i)
			first := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
			if _, err := assignViews(first, ctx, []int32{part}); err != nil {
				t.Fatal(err)
			}
			batch := func(a *Aggregator, from, n int) {
				offs := make([]int64, n)
				vals := make([][]byte, n)
				for j := range n {
					offs[j] = int64(from + j)
					vals[j] = view(item, fmt.Sprintf("v%d", from+j), clock.Add(-time.Duration(j)*time.Minute).UnixMilli())
				}
				processAt(a, part, offs, vals)
				clock = clock.Add(cfg.FlushInterval)
				if _, err := flushViews(a, ctx); err != nil {
					t.Fatal(err)
				}
				settle(t, a)
			}
			batch(first, 0, 30)
			batch(first, 30, 70) // its marker vouches for the first batch's rollups only
			// Lose the second batch's rollup rows, as a ClickHouse killed mid-flush would.
			for _, table := range tt.lose {
				col := map[string]string{"views_by_minute": "toStartOfMinute(second)", "views_by_hour": "toStartOfHour(second)"}[table]
				if col == "" {
					col = "toDate(second)"
				}
				q := fmt.Sprintf(`INSERT INTO %s SELECT item_id, %s, -toInt64(sum(views)) FROM view_deltas
					WHERE item_id = ? AND partition = ? AND end_offset = 100 GROUP BY item_id, %s`, table, col, col)
				if err := conn.Exec(ctx, q, item, uint16(part)); err != nil {
					t.Fatal(err)
				}
			}
			second := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
			if _, err := assignViews(second, ctx, []int32{part}); err != nil {
				t.Fatal(err)
			}
			checkRollups(t, ctx, conn, item, 100)
			// Assigning again repairs nothing more: the repair is idempotent.
			third := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
			if _, err := assignViews(third, ctx, []int32{part}); err != nil {
				t.Fatal(err)
			}
			checkRollups(t, ctx, conn, item, 100)
		})
	}
}

// On a ClickHouse cluster the rollup tables are Replicated, which drop an INSERT block identical
// to a recent one, also when it arrives through a materialized view. Two batches, or two repairs,
// can carry identical rollup rows (one view of an item in the same second); both must count.
// The embedded engine is made to deduplicate the same way: the rollups get a deduplication
// window (as Replicated tables have), and INSERT ... SELECT is deduplicated whatever the query
// (as servers before 26.1 did).
func TestIdenticalRollupRowsOfTwoBatchesBothCount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_rollup_dedup_test")
	for _, r := range rollups() {
		if err := conn.Exec(ctx, "ALTER TABLE "+r.table+" MODIFY SETTING non_replicated_deduplication_window = 1000"); err != nil {
			t.Fatal(err)
		}
	}
	dedupCtx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"deduplicate_insert_select": "enable_even_for_bad_queries"}))
	clock := time.Now().UTC().Truncate(time.Second)
	// The engine deduplicates as a replica would: two identical plain INSERTs keep one block.
	for range 2 {
		if err := conn.Exec(ctx, "INSERT INTO views_by_minute VALUES ('dedup-check', ?, 1)", clock.Truncate(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if got := rollupTotals(t, ctx, conn, "dedup-check")["views_by_minute"]; got != 1 {
		t.Fatalf("got %d after two identical INSERTs; want 1 (the engine deduplicating like a replica)", got)
	}
	now := func() time.Time { return clock }
	at := clock.Add(-time.Minute) // every view in the same second
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
		MaxBatch: 1000, SketchIdle: time.Minute, Owner: "test"}
	viewer := 0
	// batch gives a one view of item at the same second, by a new viewer, and flushes it.
	batch := func(a *Aggregator, part int32, item string) {
		processViews(a, part, item, viewer, 1, at)
		viewer++
		clock = clock.Add(cfg.FlushInterval)
		if _, err := flushViews(a, dedupCtx); err != nil {
			t.Fatal(err)
		}
	}
	assign := func(part int32) *Aggregator {
		a := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
		if _, err := assignViews(a, dedupCtx, []int32{part}); err != nil {
			t.Fatal(err)
		}
		return a
	}

	t.Run("rollups of two batches", func(t *testing.T) {
		a := assign(0)
		batch(a, 0, "same-rows")
		batch(a, 0, "same-rows")
		checkRollups(t, ctx, conn, "same-rows", 2)
	})
	t.Run("two repairs", func(t *testing.T) {
		const part, item = 1, "same-repairs"
		a := assign(part)
		for round := range 2 {
			batch(a, part, item)
			batch(a, part, item) // its marker vouches for the previous batch's rollups only
			// Lose this batch's rollup rows, as a ClickHouse killed mid-flush would; the next
			// owner repairs them with the same correction each round.
			end := int64(viewer)
			for _, r := range rollups() {
				q := fmt.Sprintf(`INSERT INTO %[1]s SELECT item_id, %[2]s, -toInt64(sum(views)) FROM view_deltas
					WHERE item_id = ? AND partition = ? AND end_offset = ? GROUP BY item_id, %[2]s`, r.table, r.expr)
				lossCtx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplication_token": fmt.Sprintf("loss %d %s", round, r.table)}))
				if err := conn.Exec(lossCtx, q, item, uint16(part), end); err != nil {
					t.Fatal(err)
				}
			}
			a = assign(part)
		}
		checkRollups(t, ctx, conn, item, 4)
	})
}

// processViews gives a the records from to from+n-1 of part: views of item by viewers "v<offset>" at ts.
func processViews(a *Aggregator, part int32, item string, from, n int, ts time.Time) {
	offs := make([]int64, n)
	vals := make([][]byte, n)
	for j := range n {
		offs[j] = int64(from + j)
		vals[j] = view(item, fmt.Sprintf("v%d", from+j), ts.UnixMilli())
	}
	processAt(a, part, offs, vals)
}

// An aggregator that lost its partition (stalled past the session timeout) must not add its
// batch to what the new owner writes. The fence check before the write drops it; a write that
// slipped between that check and its INSERT is dropped by the statement's own check; rows that
// commit after the claim all the same (a server running statements concurrently) are found by
// the owner and undone.
func TestZombieBatchesAreFencedOrUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_zombie_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 2 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	tests := []struct {
		name string
		// slip says how the zombie's batch gets past its check of the claims: "" it does not
		// (its next flush checks first), "statement" its INSERTs are sent after the new owner's
		// claim (a stall between check and INSERT), "commit" its rows commit after the claim
		// although the statement's own check ran before it (a ClickHouse server running
		// statements concurrently).
		slip string
	}{
		{"fence check drops the batch", ""},
		{"batch sent past the check is dropped by the statement", "statement"},
		{"batch committed past the claim is undone", "commit"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			part := int32(10 + i)
			item := fmt.Sprintf("zombie-%d", i)
			process := func(a *Aggregator, from, n int) { processViews(a, part, item, from, n, clock) }
			zombie := New(Config{Owner: "zombie", Window: cfg.Window, Grace: cfg.Grace, FlushInterval: cfg.FlushInterval,
				SketchInterval: cfg.SketchInterval, MaxBatch: cfg.MaxBatch, SketchIdle: cfg.SketchIdle}, conn, now, infra.Logger, prometheus.NewRegistry())
			if _, err := assignViews(zombie, ctx, []int32{part}); err != nil {
				t.Fatal(err)
			}
			process(zombie, 0, 40)
			clock = clock.Add(cfg.SketchInterval) // deltas and sketches: the checkpoint is 40
			if _, err := flushViews(zombie, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, zombie)
			process(zombie, 40, 60) // pending when it stalls

			owner := New(Config{Owner: "owner", Window: cfg.Window, Grace: cfg.Grace, FlushInterval: cfg.FlushInterval,
				SketchInterval: cfg.SketchInterval, MaxBatch: cfg.MaxBatch, SketchIdle: cfg.SketchIdle}, conn, now, infra.Logger, prometheus.NewRegistry())
			resume, err := assignViews(owner, ctx, []int32{part})
			if err != nil || resume[part] != 40 {
				t.Fatalf("got resume %v, %v; want partition %d at 40", resume, err, part)
			}
			process(owner, 40, 60)
			clock = clock.Add(cfg.FlushInterval)
			if _, err := flushViews(owner, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, owner)

			if tt.slip != "" {
				// The zombie's fence check passed before the claim; its INSERTs arrive now.
				zp := heldPart(zombie, part)
				parts := []*partition{zp}
				deltas := func() error { return zombie.store.writeDeltas(ctx, parts, clock) }
				want := 100 // the statement drops the batch: nothing of it lands
				if tt.slip == "commit" {
					deltas = func() error { return zombie.store.writeDeltasInto(ctx, "view_deltas", parts, clock) }
					want = 160 // it lands; the owner must find and undo it
				}
				for _, write := range []func() error{
					func() error { return zombie.store.writeBatchItems(ctx, parts, clock) },
					deltas,
					func() error { zp.addRollups(); return zombie.store.writeRollups(ctx, parts) },
				} {
					if err := write(); err != nil {
						t.Fatal(err)
					}
				}
				// Its rollup rows arrive after the owner's claim and are dropped.
				got := rollupTotals(t, ctx, conn, item)
				if got["view_deltas"] != int64(want) || got["views_total"] != 100 {
					t.Fatalf("got %d views in the deltas and %d in views_total after the zombie's write; want %d and 100", got["view_deltas"], got["views_total"], want)
				}
				clock = clock.Add(cfg.SketchInterval) // the owner looks for zombies' batches
				if _, err := flushViews(owner, ctx); err != nil {
					t.Fatal(err)
				}
				settle(t, owner)
			} else {
				clock = clock.Add(cfg.FlushInterval)
				done, err := flushViews(zombie, ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(done) != 0 {
					t.Errorf("got zombie batches written %v; want none", done)
				}
				if heldPart(zombie, part) != nil {
					t.Error("got the partition still held by the zombie; want it dropped")
				}
			}
			checkRollups(t, ctx, conn, item, 100)
			// Only a batch whose deltas landed is deleted (a DELETE is a mutation, about a second
			// of the engine's even when it matches nothing), and once: the owner's next check
			// repairs the rollups of the batch it undid again, and finds its marker gone.
			wantDeletes := 0
			if tt.slip == "commit" {
				wantDeletes = 1
			}
			if got := deltaDeletes(t, ctx, conn, part); got != wantDeletes {
				t.Errorf("got %d DELETEs of the partition's deltas; want %d", got, wantDeletes)
			}
			// The owner's successor resumes from the owner's checkpoints (deltas and sketches,
			// once the owner wrote its sketches), not the zombie's.
			clock = clock.Add(cfg.SketchInterval)
			if _, err := flushViews(owner, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, owner)
			if got := deltaDeletes(t, ctx, conn, part); got != wantDeletes {
				t.Errorf("got %d DELETEs of the partition's deltas after the owner's next check; want %d", got, wantDeletes)
			}
			checkRollups(t, ctx, conn, item, 100)
			next := New(Config{Owner: "next", Window: cfg.Window, Grace: cfg.Grace, FlushInterval: cfg.FlushInterval,
				SketchInterval: cfg.SketchInterval, MaxBatch: cfg.MaxBatch, SketchIdle: cfg.SketchIdle}, conn, now, infra.Logger, prometheus.NewRegistry())
			resume, err = assignViews(next, ctx, []int32{part})
			if err != nil || resume[part] != 100 {
				t.Fatalf("got resume %v, %v; want partition %d at 100", resume, err, part)
			}
			checkRollups(t, ctx, conn, item, 100)
		})
	}
}

// An owner that lost its partition without knowing it yet (stalled past the session timeout)
// may still send rollup statements. A statement of the displaced owner that reaches ClickHouse
// after the new owner's claim must change no rollup: the new owner has already repaired the
// buckets from the deltas, so whatever the displaced owner adds is counted twice.
func TestDisplacedOwnerCannotChangeRollups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_displaced_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 2 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	tests := []struct {
		name string
		// late runs the displaced owner's statement; between runs the new owner's statements
		// that precede it (the new owner's batch is 40-100 and its rollups are written after).
		late func(t *testing.T, old, owner *Aggregator, part int32)
	}{
		{"rollup write of a batch the new owner already repaired", func(t *testing.T, old, owner *Aggregator, part int32) {
			// The old owner's deltas of 40-100 landed before the new owner read the checkpoint,
			// so the new owner resumed at 100 and repaired their rollups; the old owner's
			// rollup INSERT lands now.
			op := heldPart(old, part)
			op.addRollups()
			if err := old.store.writeRollups(ctx, []*partition{op}); err != nil {
				t.Fatal(err)
			}
		}},
		{"repair between the new owner's deltas and its rollups", func(t *testing.T, old, owner *Aggregator, part int32) {
			// The old owner still rechecks a batch it undid (a zombie's) at every sketch
			// interval; its repair compares the rollups with deltas that already hold the new
			// owner's batch, whose rollups are not written yet.
			op := heldPart(owner, part)
			parts := []*partition{op}
			for _, write := range []func() error{
				func() error { return owner.store.writeDedupe(ctx, parts) },
				func() error { return owner.store.writeBatchItems(ctx, parts, clock) },
				func() error { return owner.store.writeDeltas(ctx, parts, clock) },
			} {
				if err := write(); err != nil {
					t.Fatal(err)
				}
			}
			clock = clock.Add(cfg.SketchInterval)
			if _, err := flushViews(old, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, old)
			op.addRollups()
			if err := owner.store.writeRollups(ctx, parts); err != nil {
				t.Fatal(err)
			}
			op.markFlushed(op.next, clock)
			op.rolledAll()
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			part := int32(20 + i)
			item := fmt.Sprintf("displaced-%d", i)
			process := func(a *Aggregator, from, n int) { processViews(a, part, item, from, n, clock) }
			withOwner := func(owner string) Config { c := cfg; c.Owner = owner; return c }
			// A zombie's batch that the old owner undoes, and so rechecks for a while.
			if err := conn.Exec(ctx, `INSERT INTO batch_items (partition, end_offset, epoch, item_id, written_at) VALUES (?, 5, 0, ?, ?)`,
				uint16(part), item, clock); err != nil {
				t.Fatal(err)
			}
			old := New(withOwner("old"), conn, now, infra.Logger, prometheus.NewRegistry())
			if _, err := assignViews(old, ctx, []int32{part}); err != nil {
				t.Fatal(err)
			}
			process(old, 0, 40)
			clock = clock.Add(cfg.SketchInterval)
			if _, err := flushViews(old, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, old)
			if i == 0 {
				// The old owner's deltas of 40-100 land; it checked the claims just before and
				// will write the rollups next.
				process(old, 40, 60)
				parts := []*partition{heldPart(old, part)}
				if err := old.store.writeBatchItems(ctx, parts, clock); err != nil {
					t.Fatal(err)
				}
				if err := old.store.writeDeltas(ctx, parts, clock); err != nil {
					t.Fatal(err)
				}
			}
			owner := New(withOwner("owner"), conn, now, infra.Logger, prometheus.NewRegistry())
			resume, err := assignViews(owner, ctx, []int32{part})
			// At the sketch checkpoint, 40: in the first case 40-100 go into the sketches only.
			if err != nil || resume[part] != 40 {
				t.Fatalf("got resume %v, %v; want partition %d at 40", resume, err, part)
			}
			process(owner, 40, 60)
			tt.late(t, old, owner, part)
			// Right away: the new owner may hand the partition on before it looks again (a
			// revocation writes its batch and repairs nothing), so nothing heals a wrong bucket
			// for certain.
			checkRollups(t, ctx, conn, item, 100)
			clock = clock.Add(cfg.SketchInterval)
			if _, err := flushViews(owner, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, owner)
			checkRollups(t, ctx, conn, item, 100)
		})
	}
}

// A displaced owner's whole sketches are stale (they lack what the new owner counted since) but
// stamped later, so they would win every read of unique_viewers: once the new owner's fold
// checkpoint passed its deltas, the next owner would load the stale sketch alone and those
// viewers would be gone for good. Whether the displaced owner writes in a flush after it woke or
// its writes slipped past its check of the claims, nothing of it may count.
func TestDisplacedOwnerCannotChangeSketches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_displaced_sketch_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 2 * time.Second,
		FoldInterval: 2 * time.Second, MaxBatch: 1000, SketchIdle: time.Minute}
	tests := []struct {
		name  string
		write func(t *testing.T, old *Aggregator, part int32) // the displaced owner's sketch write
	}{
		{"flush after it woke", func(t *testing.T, old *Aggregator, part int32) {
			if _, err := flushViews(old, ctx); err != nil {
				t.Fatal(err)
			}
			settle(t, old)
		}},
		{"writes that slipped past its check", func(t *testing.T, old *Aggregator, part int32) {
			p := heldPart(old, part)
			parts := []*partition{p}
			rows, _ := sketchDeltaRows(parts, clock, false)
			if err := old.store.insertSketchDeltas(ctx, rows, clock); err != nil {
				t.Fatal(err)
			}
			if err := old.store.writeSketchCheckpoints(ctx, []offsetRow{{p.id, p.epoch, p.next}}, clock); err != nil {
				t.Fatal(err)
			}
			p.foldFrom = p.next
			if err := old.store.writeFolds(ctx, map[*partition][]sketchKey{p: slices.Collect(maps.Keys(p.sketches))}, clock); err != nil {
				t.Fatal(err)
			}
			if err := old.store.writeFoldCheckpoints(ctx, parts, clock); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			part := int32(30 + i)
			item := fmt.Sprintf("sketch-%d", i)
			withOwner := func(owner string) Config { c := cfg; c.Owner = owner; return c }
			assign := func(owner string) (*Aggregator, int64) {
				a := New(withOwner(owner), conn, now, infra.Logger, prometheus.NewRegistry())
				resume, err := assignViews(a, ctx, []int32{part})
				if err != nil {
					t.Fatal(err)
				}
				return a, resume[part]
			}
			flush := func(a *Aggregator) {
				clock = clock.Add(cfg.SketchInterval)
				if _, err := flushViews(a, ctx); err != nil {
					t.Fatal(err)
				}
				settle(t, a)
			}
			old, _ := assign("old")
			processViews(old, part, item, 0, 100, clock)
			flush(old)                                    // sketches hold v0-v99
			processViews(old, part, item, 100, 50, clock) // pending when it stalls
			owner, at := assign("owner")
			if at != 100 {
				t.Fatalf("got the owner resuming at %d; want 100", at)
			}
			processViews(owner, part, item, 100, 200, clock)
			flush(owner) // sketch deltas hold v100-v299, the first fold cycle v0-v99
			flush(owner) // the second fold cycle folds v0-v299: nothing above it is unfolded
			clock = clock.Add(cfg.SketchInterval)
			tt.write(t, old, part) // v0-v149, stamped after the owner's
			// The owner crashes before it folds the item's sketch again; the next owner loads the
			// stored sketch and resumes at the sketch checkpoint.
			next, at := assign("next")
			if at != 300 {
				t.Fatalf("got the next owner resuming at %d; want 300", at)
			}
			processViews(next, part, item, 300, 100, clock)
			flush(next)
			var got uint64
			if err := conn.QueryRow(ctx, "SELECT viewers FROM unique_viewers_latest WHERE item_id = ? AND day = toDate(0)", item).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got < 396 || got > 404 { // 400 viewers; HyperLogLog counts this few exactly or nearly
				t.Errorf("got %d unique viewers of %s; want 400", got, item)
			}
		})
	}
}

// A partition dropped for a newer owner's claim whose records the group still delivers (a
// static member that rejoined keeps its assignment, with no revocation or loss) is handed back
// for claiming again instead of being ignored for good; one the group revoked or lost is not.
// The drop is reported once (Dropped), for the member to fetch the partition's records again.
func TestFencedPartitionStillAssignedIsReclaimed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_reclaim_test")
	clock := time.Now().UTC().Truncate(time.Second)
	now := func() time.Time { return clock }
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Hour,
		MaxBatch: 1000, SketchIdle: time.Minute}
	tests := []struct {
		name   string
		told   func(a *Aggregator, part int32) // what the group tells after the drop
		wantIn bool
	}{
		{"still delivered", func(*Aggregator, int32) {}, true},
		{"lost", func(a *Aggregator, part int32) { a.Lost([]int32{part}) }, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			part := int32(40 + i)
			item := fmt.Sprintf("reclaim-%d", i)
			old := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
			if _, err := assignViews(old, ctx, []int32{part}); err != nil {
				t.Fatal(err)
			}
			if _, err := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry()).Assign(ctx, []int32{part}); err != nil {
				t.Fatal(err)
			}
			processViews(old, part, item, 0, 10, clock)
			clock = clock.Add(cfg.FlushInterval)
			if _, err := flushViews(old, ctx); err != nil { // dropped: a newer owner claimed it
				t.Fatal(err)
			}
			settle(t, old)
			if got := old.Dropped(); len(got) != 1 || got[0] != part {
				t.Fatalf("got dropped %v after the fence check; want [%d], for the member to fetch it again", got, part)
			}
			if got := old.Dropped(); len(got) != 0 {
				t.Errorf("got dropped %v after taking them; want none", got)
			}
			tt.told(old, part)
			processViews(old, part, item, 10, 10, clock)
			got := old.Reclaims()
			if want := []int32{part}; tt.wantIn != (len(got) == 1 && got[0] == part) {
				t.Fatalf("got reclaims %v; want %v: %v", got, want, tt.wantIn)
			}
			if got := old.Reclaims(); len(got) != 0 {
				t.Errorf("got reclaims %v after taking them; want none", got)
			}
		})
	}
}

// Two claimants that read the claims before either recorded its own both take the next epoch.
// Only the first to record it may hold it: with two claims of one epoch both owners count as
// current, and the one starting lower makes invalid the batches the other's checkpoint counts as
// done. The second claimant has its row dropped, reads the claims again and takes the epoch
// after, with a fence that holds the first one's claim.
func TestOneClaimPerEpoch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_one_claim_per_epoch_test")
	claims := fence.Table{Conn: conn, Name: "partition_claims", Starts: []string{"start_offset"}, Ends: viewColumns}
	const part = int32(7)
	at := time.Now().UTC().Truncate(time.Millisecond)
	next := func(start int64) func(fence.Fence) (fence.Claim, error) {
		return func(f fence.Fence) (fence.Claim, error) {
			return fence.Claim{Epoch: f.MaxEpoch() + 1, Start: []int64{start}, At: at}, nil
		}
	}
	if _, c, err := claims.Acquire(ctx, part, "first", next(0)); err != nil || c.Epoch != 1 {
		t.Fatalf("got claim %+v, %v; want epoch 1", c, err)
	}

	var seen []uint64 // the newest epoch of the fence each attempt of the late claimant built on
	f, late, err := claims.Acquire(ctx, part, "late", func(f fence.Fence) (fence.Claim, error) {
		seen = append(seen, f.MaxEpoch())
		if len(seen) == 1 { // another claimant records epoch 2 between this one's read and its insert
			if _, c, err := claims.Acquire(ctx, part, "early", next(100)); err != nil || c.Epoch != 2 {
				t.Fatalf("got the early claim %+v, %v; want epoch 2", c, err)
			}
		}
		return next(50)(f)
	})
	if err != nil {
		t.Fatal(err)
	}
	if late.Epoch != 3 || !slices.Equal(seen, []uint64{1, 2}) || f.MaxEpoch() != 2 {
		t.Errorf("got the late claim at epoch %d after fences up to epochs %v (returned fence up to %d); want epoch 3 after [1 2] (2)", late.Epoch, seen, f.MaxEpoch())
	}
	var rows []string
	if err := chclient.Each(ctx, conn, `SELECT concat(toString(epoch), ' ', owner, ' ', toString(start_offset)) FROM partition_claims WHERE partition = ? ORDER BY epoch, owner`,
		[]any{uint16(part)}, func(r driver.Rows) error {
			var s string
			rows = append(rows, s)
			return r.Scan(&rows[len(rows)-1])
		}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1 first 0", "2 early 100", "3 late 50"}; !slices.Equal(rows, want) {
		t.Errorf("got claims %q; want %q", rows, want)
	}

	// A claimant that retries after an attempt whose outcome it could not tell finds its own claim.
	if _, c, err := claims.Acquire(ctx, part, "late", func(fence.Fence) (fence.Claim, error) { return late, nil }); err != nil || c.Epoch != 3 {
		t.Errorf("got %+v, %v retrying the late claim; want it held at epoch 3", c, err)
	}

	// The claims lost (deleted by hand): the next claim's epochs were used before, and the
	// server still remembers their tokens (a TRUNCATE would clear them). The claimant gets an
	// epoch all the same, above those.
	if err := conn.Exec(ctx, `DELETE FROM partition_claims WHERE partition = ?`, uint16(part)); err != nil {
		t.Fatal(err)
	}
	if _, c, err := claims.Acquire(ctx, part, "after", next(0)); err != nil || c.Epoch != 4 {
		t.Errorf("got %+v, %v claiming after the claims were lost; want epoch 4", c, err)
	}
}
