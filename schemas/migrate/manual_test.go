package migrate

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The script of `aggregator migrate print`, run by hand statement by statement, leaves the
// tables and views the automatic path makes, recorded so that the automatic path then applies
// nothing; Status follows the database through pending, part-applied, applied and changed.
func TestScriptByHandMatchesTheAutomaticPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ms, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	newest := ms[len(ms)-1].Version
	auto := infra.DB(t, ctx, "migrate_auto")
	if _, err := ApplyTo(ctx, auto, infra.Logger, Target{}); err != nil {
		t.Fatal(err)
	}
	byHand := infra.DB(t, ctx, "migrate_by_hand")
	if got := statusLine(t, ctx, byHand); got != fmt.Sprintf("%d pending", len(ms)) {
		t.Errorf("fresh database: got %s; want %d pending", got, len(ms))
	}
	run := func(after uint32) {
		var script bytes.Buffer
		if err := Script(&script, Target{}, after); err != nil {
			t.Fatal(err)
		}
		for _, s := range splitStatements(script.String()) {
			if err := byHand.Exec(ctx, s); err != nil {
				t.Fatalf("by hand, %.80q: %v", s, err)
			}
		}
	}
	run(0)
	if got := statusLine(t, ctx, byHand); got != fmt.Sprintf("%d applied", len(ms)) {
		t.Errorf("after the script: got %s; want %d applied", got, len(ms))
	}
	if got, want := schemaOf(t, ctx, byHand, "migrate_by_hand"), schemaOf(t, ctx, auto, "migrate_auto"); got != want {
		t.Errorf("by hand the schema is\n%s\nwant, as the automatic path makes it,\n%s", got, want)
	}
	run(newest - 1) // the last migration again, as an operator might: idempotent
	var records uint64
	if err := byHand.QueryRow(ctx, "SELECT count() FROM schema_migrations FINAL").Scan(&records); err != nil || records != uint64(len(ms)) {
		t.Errorf("got %d schema_migrations rows (%v); want %d", records, err, len(ms))
	}
	if err := byHand.Exec(ctx, "INSERT INTO schema_migrations (version, name, checksum) VALUES (?, 'x', 'other')", newest); err != nil {
		t.Fatal(err)
	}
	if got := statusLine(t, ctx, byHand); got != fmt.Sprintf("%d applied, 1 changed", len(ms)-1) {
		t.Errorf("a record of another file: got %s; want %d applied, 1 changed", got, len(ms)-1)
	}
}

// statusLine sums Status up, as "N applied, M pending".
func statusLine(t *testing.T, ctx context.Context, conn driver.Conn) string {
	t.Helper()
	states, err := Status(ctx, conn, Target{})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, s := range states {
		n[s.Status]++
	}
	var parts []string
	for _, k := range []string{"applied", "pending", "changed"} {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

// schemaOf is every table and view of db with its CREATE statement, db's name taken out, and
// schema_migrations left out (its applied_at differs).
func schemaOf(t *testing.T, ctx context.Context, conn driver.Conn, db string) string {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT name, create_table_query FROM system.tables WHERE database = ? AND name != 'schema_migrations' ORDER BY name", db)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var name, create string
		if err := rows.Scan(&name, &create); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %s\n", name, strings.ReplaceAll(create, db+".", ""))
	}
	return b.String()
}
