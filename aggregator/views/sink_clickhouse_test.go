package views

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/schemas/dedupe"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// Migration 026 moves the dedupe state from a row per counted view (dedupe_state) to a row per
// batch (dedupe_batches): a window restored after the upgrade still holds the pairs counted
// before it, and the migration runs again cleanly after its DROP went through (a process that
// stopped before recording it).
func TestDedupeStateSurvivesMigration026(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := infra.DB(t, ctx, "views_dedupe_upgrade_test")
	ms, err := migrate.Load()
	if err != nil {
		t.Fatal(err)
	}
	run := func(m migrate.Migration) {
		t.Helper()
		for _, s := range m.Statements {
			if err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("migration %d: %v", m.Version, err)
			}
		}
	}
	var m026 migrate.Migration
	var later []migrate.Migration
	for _, m := range ms {
		switch {
		case m.Version < 26:
			run(m)
		case m.Version == 26:
			m026 = m
		default:
			later = append(later, m)
		}
	}
	clock := testinfra.RecentNoon()
	now := func() time.Time { return clock }
	const part, item = int32(21), "upgraded"
	held := clock.Add(-time.Minute).UnixMilli()
	if err := conn.Exec(ctx, "INSERT INTO dedupe_state (partition, end_offset, pair, last_ms) VALUES (?, 0, ?, ?)",
		uint16(part), dedupe.Key("before", item), held); err != nil {
		t.Fatal(err)
	}
	run(m026)
	run(m026)
	for _, m := range later {
		run(m)
	}

	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: 10 * time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	// A first batch gives the partition a checkpoint, at 1; the migrated pair's batch ended at 0.
	first := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(first, ctx, []int32{part}); err != nil {
		t.Fatal(err)
	}
	processAt(first, part, []int64{0}, [][]byte{view("other", "before", held)})
	if _, err := flushAllViews(first, ctx); err != nil {
		t.Fatal(err)
	}
	a := New(cfg, conn, now, infra.Logger, prometheus.NewRegistry())
	if resume, err := assignViews(a, ctx, []int32{part}); err != nil || resume[part] != 1 {
		t.Fatalf("got resume %v, %v; want partition %d at 1", resume, err, part)
	}
	processAt(a, part, []int64{1, 2}, [][]byte{view(item, "before", held), view(item, "after", held)})
	if _, err := flushAllViews(a, ctx); err != nil {
		t.Fatal(err)
	}
	var got uint64
	if err := conn.QueryRow(ctx, "SELECT sum(views) FROM view_deltas WHERE item_id = ?", item).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Errorf("got %d views of %s; want 1 (the pair counted before the upgrade is a duplicate)", got, item)
	}
	var tables uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = 'dedupe_state'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("got %d dedupe_state tables after the migration; want 0", tables)
	}
}
