package testinfra

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
)

// NewDB returns a connection to database db on the embedded engine, empty: a database of that
// name left by an earlier run of the tests in this process (go test -count) is dropped first.
// The caller closes it; tests use DB.
func (in *Infra) NewDB(ctx context.Context, db string) (driver.Conn, error) {
	opts := chclient.Options{Addr: in.ClickHouse.Addr(), Database: db, Username: "default", Password: ClickHousePassword}
	conn, err := chclient.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("drop test database %s: %w", db, err)
	}
	return chclient.Open(ctx, opts)
}

// DB is NewDB for a test: it fails t on error and closes the connection when t ends.
func (in *Infra) DB(t testing.TB, ctx context.Context, db string) driver.Conn {
	t.Helper()
	conn, err := in.NewDB(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// RecentNoon is noon UTC of yesterday, the clock of tests that write rows ClickHouse expires
// by a TTL on their own time (dedupe state and sketch deltas after 2 days, raw view seconds
// after 7, clicks after 8: schemas/migrations). The engine drops a row already past its TTL
// as it inserts it, so a fixed date in such a test starts failing once the calendar passes it
// by the TTL. Noon keeps a test's hours away from a day's edges; yesterday keeps its minutes in
// the past.
func RecentNoon() time.Time {
	return time.Now().UTC().Truncate(24 * time.Hour).Add(-12 * time.Hour)
}
