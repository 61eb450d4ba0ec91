package migrate

import (
	"regexp"
	"strings"
	"testing"
)

func TestClusterStatement(t *testing.T) {
	const rp = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"
	tests := []struct {
		name string
		in   string
		dist map[string]bool // tables with a _dist before the statement
		want []string
	}{
		{"merge tree table gets replication and a dist table",
			"CREATE TABLE IF NOT EXISTS t (a UInt8)\nENGINE = MergeTree\nORDER BY a",
			nil,
			[]string{"CREATE TABLE IF NOT EXISTS t ON CLUSTER c (a UInt8)\nENGINE = ReplicatedMergeTree(" + rp + ")\nORDER BY a",
				"CREATE TABLE IF NOT EXISTS t_dist ON CLUSTER c AS t ENGINE = Distributed(c, currentDatabase(), t)"}},
		{"version column follows the replica arguments",
			"CREATE TABLE IF NOT EXISTS likes (a UInt8, offset Int64) ENGINE = ReplacingMergeTree(offset) ORDER BY a",
			nil,
			[]string{"CREATE TABLE IF NOT EXISTS likes ON CLUSTER c (a UInt8, offset Int64) ENGINE = ReplicatedReplacingMergeTree(" + rp + ", offset) ORDER BY a",
				"CREATE TABLE IF NOT EXISTS likes_dist ON CLUSTER c AS likes ENGINE = Distributed(c, currentDatabase(), likes)"}},
		{"summing without arguments",
			"CREATE TABLE IF NOT EXISTS m (a String, v Int64) ENGINE = SummingMergeTree ORDER BY a TTL x",
			nil,
			[]string{"CREATE TABLE IF NOT EXISTS m ON CLUSTER c (a String, v Int64) ENGINE = ReplicatedSummingMergeTree(" + rp + ") ORDER BY a TTL x",
				"CREATE TABLE IF NOT EXISTS m_dist ON CLUSTER c AS m ENGINE = Distributed(c, currentDatabase(), m)"}},
		{"null table: one per server, no dist",
			"CREATE TABLE IF NOT EXISTS input (a String) ENGINE = Null", nil,
			[]string{"CREATE TABLE IF NOT EXISTS input ON CLUSTER c (a String) ENGINE = Null"}},
		{"view", "CREATE VIEW IF NOT EXISTS v AS SELECT 1", nil, []string{"CREATE VIEW IF NOT EXISTS v ON CLUSTER c AS SELECT 1"}},
		{"materialized view", "CREATE MATERIALIZED VIEW IF NOT EXISTS mv TO m AS SELECT 1", nil,
			[]string{"CREATE MATERIALIZED VIEW IF NOT EXISTS mv ON CLUSTER c TO m AS SELECT 1"}},
		{"column alter follows to the dist table", "ALTER TABLE m MODIFY COLUMN v Int64", map[string]bool{"m": true},
			[]string{"ALTER TABLE m ON CLUSTER c MODIFY COLUMN v Int64", "ALTER TABLE m_dist ON CLUSTER c MODIFY COLUMN v Int64"}},
		{"other alter stays on the table", "ALTER TABLE m MODIFY TTL x", map[string]bool{"m": true},
			[]string{"ALTER TABLE m ON CLUSTER c MODIFY TTL x"}},
		{"drop view", "DROP VIEW IF EXISTS mv", nil, []string{"DROP VIEW IF EXISTS mv ON CLUSTER c"}},
		{"drop table drops its dist first", "DROP TABLE IF EXISTS m", map[string]bool{"m": true},
			[]string{"DROP TABLE IF EXISTS m_dist ON CLUSTER c", "DROP TABLE IF EXISTS m ON CLUSTER c"}},
		{"rename drops the dist pointing at the old name", "RENAME TABLE IF EXISTS m TO old", map[string]bool{"m": true},
			[]string{"DROP TABLE IF EXISTS m_dist ON CLUSTER c", "RENAME TABLE IF EXISTS m TO old ON CLUSTER c"}},
		{"insert select stays", "INSERT INTO m SELECT 1", nil, []string{"INSERT INTO m SELECT 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dist := map[string]bool{}
			for k := range tt.dist {
				dist[k] = true
			}
			got, err := clusterStatement(tt.in, "c", dist)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n;\n") != strings.Join(tt.want, "\n;\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n;\n"), strings.Join(tt.want, "\n;\n"))
			}
		})
	}
}

// TestForClusterOfTheMigrations rewrites tally's own migrations and checks the result as a
// whole: every DDL statement runs ON CLUSTER, no plain MergeTree engine is left, and the
// tables the migrations leave in place each have a Distributed table, while those they drop
// or rename away have none.
func TestForClusterOfTheMigrations(t *testing.T) {
	ms, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	cms, err := ForCluster(ms, "tally_cluster")
	if err != nil {
		t.Fatal(err)
	}
	if len(cms) != len(ms) {
		t.Fatalf("got %d migrations; want %d", len(cms), len(ms))
	}
	for i, m := range cms {
		if m.Version != ms[i].Version || m.Checksum != ms[i].Checksum {
			t.Errorf("migration %d: got version %d checksum %.8s; want %d %.8s", i, m.Version, m.Checksum, ms[i].Version, ms[i].Checksum)
		}
		for _, s := range m.Statements {
			ddl := regexpDDL.MatchString(s)
			if ddl && !strings.Contains(s, " ON CLUSTER tally_cluster") {
				t.Errorf("migration %03d: DDL without ON CLUSTER: %.80q", m.Version, s)
			}
			if engineRe.MatchString(s) && !strings.Contains(s, "Replicated") {
				t.Errorf("migration %03d: unreplicated engine: %.80q", m.Version, s)
			}
		}
	}
	left := map[string]bool{}
	for _, o := range objects(cms) {
		left[o.name] = true
	}
	for _, want := range []string{"view_deltas_dist", "likes_dist", "views_total_by_day_dist", "views_by_minute_dist", "dead_letters_dist"} {
		if !left[want] {
			t.Errorf("got no %s; want a Distributed table for every replicated table left", want)
		}
	}
	for _, gone := range []string{"views_total_dist", "views_total_legacy_dist"} {
		if left[gone] {
			t.Errorf("got %s; want none (its table was renamed away)", gone)
		}
	}
}

func TestForClusterRefusesABadName(t *testing.T) {
	if _, err := ForCluster(nil, "a;DROP"); err == nil || !strings.Contains(err.Error(), "cluster name") {
		t.Fatalf("got %v; want the cluster name refused", err)
	}
}

var regexpDDL = regexp.MustCompile(`(?is)^(CREATE|DROP|ALTER|RENAME)\s`)
