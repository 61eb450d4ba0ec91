package aggregator

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/aggregator/aggregatorconf"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process).
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

// A table or view dropped behind the migrations' back (they stay recorded as applied) is
// re-created when the aggregator starts again, and the totals work through it.
func TestStartRecreatesDroppedSchemaObjects(t *testing.T) {
	tests := []struct {
		name string
		drop string
	}{
		{"the all-time totals view", "DROP TABLE views_total"},
		{"the all-time totals by day", "DROP TABLE views_total_by_day"},
		{"the deltas every rollup is repaired from", "DROP TABLE view_deltas"},
		{"the sketches", "DROP TABLE unique_viewers"},
		{"the dead letters", "DROP TABLE dead_letters"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := fmt.Sprintf("agg_schema_test_%d", i)
			infra.DB(t, ctx, db) // starts it empty
			var cfg config.Config
			cfg.ClickHouse = config.ClickHouse{Addr: infra.ClickHouse.Addr(), Database: db, Username: "default", Password: testinfra.ClickHousePassword}
			s := aggregatorconf.Settings{TTLSeconds: 7 * 24 * time.Hour, TTLMinutes: 90 * 24 * time.Hour, TTLDays: 730 * 24 * time.Hour}
			conn, err := OpenClickHouse(ctx, &cfg, &s, infra.Logger)
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.Exec(ctx, tt.drop); err != nil {
				t.Fatal(err)
			}
			conn.Close()
			if conn, err = OpenClickHouse(ctx, &cfg, &s, infra.Logger); err != nil {
				t.Fatalf("restart after %s: %v", tt.drop, err)
			}
			defer conn.Close()
			var missing uint64
			if err := conn.QueryRow(ctx, `SELECT count() FROM (SELECT arrayJoin(['view_deltas', 'views_total', 'views_total_by_day', 'unique_viewers', 'dead_letters']) AS name)
				WHERE name NOT IN (SELECT name FROM system.tables WHERE database = currentDatabase())`).Scan(&missing); err != nil {
				t.Fatal(err)
			}
			if missing != 0 {
				t.Fatalf("after %s and a restart: got %d objects missing; want none", tt.drop, missing)
			}
			if err := conn.Exec(ctx, "INSERT INTO view_deltas (partition, end_offset, watermark, item_id, second, views) VALUES (0, 1, now(), 'x', now(), 3)"); err != nil {
				t.Fatal(err)
			}
			// The aggregator writes the rollups after the deltas; the view sums the days.
			if err := conn.Exec(ctx, "INSERT INTO views_total_by_day (item_id, day, views) VALUES ('x', today(), 3)"); err != nil {
				t.Fatal(err)
			}
			var total uint64
			if err := conn.QueryRow(ctx, "SELECT toUInt64(sum(views)) FROM views_total WHERE item_id = 'x'").Scan(&total); err != nil {
				t.Fatal(err)
			}
			if total != 3 {
				t.Errorf("got all-time total %d after a delta of 3; want 3", total)
			}
		})
	}
}

// When a missing object cannot be re-created, the schema check refuses, naming it.
func TestSchemaRepairRefusesNamingTheObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := "agg_schema_refuse_test"
	conn := infra.DB(t, ctx, db)
	if err := conn.Exec(ctx, "DROP DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	_, err := migrate.Repair(ctx, conn, infra.Logger)
	want := "view_deltas of migration 001_views is missing and re-creating it failed"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v; want an error containing %q", err, want)
	}
}

// Collectors, aggregators and batch jobs start together against a fresh database (compose, a
// scaled Deployment): every one applies the migrations. Each statement is idempotent but a
// migration's sequence is not atomic (one process drops a table another is still copying
// from), so a process must get through by retrying, not fail to start.
func TestConcurrentMigrationsAllSucceed(t *testing.T) {
	const rounds, processes = 4, 3
	for r := range rounds {
		t.Run(fmt.Sprintf("round %d", r), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db := fmt.Sprintf("agg_concurrent_migrate_%d", r)
			infra.DB(t, ctx, db)
			errs := make(chan error, processes)
			for p := range processes {
				go func() {
					conn, err := chclient.Open(ctx, chclient.Options{Addr: infra.ClickHouse.Addr(), Database: db, Username: "default", Password: testinfra.ClickHousePassword})
					if err != nil {
						errs <- err
						return
					}
					defer conn.Close()
					_, err = migrate.Apply(ctx, conn, infra.Logger.With("process", p))
					errs <- err
				}()
			}
			for range processes {
				if err := <-errs; err != nil {
					t.Errorf("got %v from a process migrating beside others; want nil", err)
				}
			}
		})
	}
}
