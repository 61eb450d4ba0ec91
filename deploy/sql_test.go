package deploy

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas/migrate"
)

// TestClusterDDLParses generates the cluster DDL from the migrations (migrate.ForCluster) and
// has the embedded engine's parser read every statement with formatQuery, which parses without
// running: the engine cannot run ON CLUSTER or Replicated engines (no Keeper, no
// remote_servers), and its HTTP guard refuses those engines' names in a query, so each
// statement travels hex-encoded. The parsed form must still say ON CLUSTER and Replicated.
func TestClusterDDLParses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := chclient.Open(ctx, chclient.Options{Addr: engine.Addr(), Database: "ddl_check", Username: "default", Password: adminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ms, err := migrate.Load()
	if err != nil {
		t.Fatal(err)
	}
	cms, err := migrate.ForCluster(ms, "tally")
	if err != nil {
		t.Fatal(err)
	}
	parse := func(s string) (string, error) {
		var out string
		err := conn.QueryRow(ctx, "SELECT formatQuerySingleLine(unhex(?))", hex.EncodeToString([]byte(s))).Scan(&out)
		return out, err
	}
	n := 0
	for _, m := range cms {
		for i, s := range m.Statements {
			t.Run(fmt.Sprintf("%03d_%s/%d", m.Version, m.Name, i+1), func(t *testing.T) {
				got, err := parse(s)
				if err != nil {
					t.Fatalf("the engine does not parse:\n%s\n: %v", s, err)
				}
				ddl := regexp.MustCompile(`^(CREATE|DROP|ALTER|RENAME) `).MatchString(got)
				if ddl && !strings.Contains(got, "ON CLUSTER tally") {
					t.Errorf("parsed as %q; want ON CLUSTER tally", got)
				}
				if strings.Contains(got, "MergeTree") && !strings.Contains(got, "ENGINE = Replicated") {
					t.Errorf("parsed as %q; want a Replicated engine", got)
				}
			})
			n++
		}
	}
	if n == 0 {
		t.Fatal("got no statements")
	}
	// The parser is strict enough to catch a broken rewrite.
	if got, err := parse("CREATE TABLE t ON CLUSTER tally (a UInt8) ENGINE = ReplicatedMergeTree('/p', '{replica}' ORDER BY a"); err == nil {
		t.Errorf("parsed an unclosed parenthesis as %q; want the parser to refuse it", got)
	}
}

// dashboard is the part of a Grafana dashboard JSON these checks read.
type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Title      string `json:"title"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			RawSQL string `json:"rawSql"`
			Expr   string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("grafana", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("got dashboards %v, err %v; want JSON files", files, err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

// dashboardQueries lists every ClickHouse query of the dashboards, by file and panel.
var dashboardQueries = []struct{ file, panel string }{
	{"views.json", "Views per second"},
	{"views.json", "Views per minute"},
	{"views.json", "Top items by views"},
	{"views.json", "Top items by unique viewers today"},
	{"views.json", "Aggregator progress per partition"},
	{"views.json", "Data set aside (dead letters)"},
	{"likes-batch.json", "Top items by likes"},
	{"likes-batch.json", "Batch job runs (versions)"},
	{"likes-batch.json", "Drift repaired per run"},
	{"likes-batch.json", "Largest differences of the latest run"},
	{"likes-batch.json", "Views recount runs (versions)"},
	{"likes-batch.json", "Views recount differences of the latest run"},
	{"clicks-topk.json", "Clicks per minute (provisional)"},
	{"clicks-topk.json", "Clicks per day: provisional vs final"},
	{"clicks-topk.json", "Top ads by clicks"},
	{"clicks-topk.json", "Final daily click versions"},
	{"clicks-topk.json", "Top-K published (latest)"},
	{"clicks-topk.json", "Clicks aggregator progress per partition"},
}

// seed is data for every table the queries read, dated inside their time range. The click
// report and the views recount each have a complete version 1 and a version 2 whose run died
// before its run row (click_report_versions, view_recount_runs): the panels must show version 1
// only.
var seed = []string{
	`INSERT INTO tally.view_deltas (partition, end_offset, watermark, item_id, second, views) VALUES
		(0, 100, now64(3) - 5, '', now(), 0), (1, 50, now64(3) - 9, '', now(), 0),
		(0, 100, now64(3) - 5, 'post-1', now() - 60, 7), (0, 100, now64(3) - 5, 'post-2', now() - 61, 3)`,
	`INSERT INTO tally.view_rollup_input VALUES ('post-1', now() - 60, 7), ('post-2', now() - 120, 3)`,
	`INSERT INTO tally.unique_viewers VALUES ('post-1', today(), '', 5, now64(6) - 10), ('post-2', today(), '', 2, now64(6))`,
	`INSERT INTO tally.unique_viewer_deltas VALUES (0, 100, 'post-1', today(), '', 6, now64(6))`,
	`INSERT INTO tally.dead_letters (source, partition, offset, ref, reason, payload) VALUES ('views', 3, 17, '', 'does not decode', 'xx')`,
	`INSERT INTO tally.likes VALUES ('post-1', 'u1', 1, 0, 1, now64(3)), ('post-1', 'u2', 1, 0, 2, now64(3)), ('post-2', 'u1', 1, 1, 1, now64(3))`,
	`INSERT INTO tally.like_reconciliation_runs VALUES (1, now64(3) - 100, now64(3) - 90, 'date 2026-11-30', 10, 1, 1), (2, now64(3) - 60, now64(3) - 50, 'all', 12, 2, 2)`,
	`INSERT INTO tally.like_reconciliation_diffs VALUES (1, 'post-1', 'redis', 2, 1, 1, 1), (2, 'post-2', 'clickhouse', 1, 3, -2, 1), (2, 'post-1', 'redis', 2, 0, 2, 1)`,
	`INSERT INTO tally.click_deltas (partition, epoch, clicks_end, verdicts_end, watermark, rolled_clicks, rolled_verdicts, ad_id, minute, clicks, billable) VALUES
		(0, 1, 40, 3, now64(3) - 5, 0, 0, '', toStartOfMinute(now()), 0, 0),
		(0, 1, 40, 3, now64(3) - 5, 0, 0, 'ad-1', toStartOfMinute(now() - 120), 9, 8),
		(0, 1, 40, 3, now64(3) - 5, 0, 0, 'ad-2', toStartOfMinute(now() - 60), 4, 4)`,
	`INSERT INTO tally.click_reports_daily VALUES
		(today() - 1, 1, 'ad-1', 11, 10, now64(3) - 3600), (today() - 1, 1, 'ad-2', 5, 5, now64(3) - 3600),
		(today() - 1, 2, 'ad-1', 99, 99, now64(3) - 60)`,
	`INSERT INTO tally.click_report_versions VALUES (today() - 1, 1, now64(3) - 3700, now64(3) - 3600, 'kafka', 2, 16, 15, 1, 1, 18)`,
	// Yesterday's provisional clicks, at noon: on the final report's day whatever the time of
	// day the test runs.
	`INSERT INTO tally.click_deltas (partition, epoch, clicks_end, verdicts_end, watermark, rolled_clicks, rolled_verdicts, ad_id, minute, clicks, billable) VALUES
		(1, 1, 20, 0, now64(3) - 5, 0, 0, 'ad-1', toDateTime(today() - 1) + 43200, 16, 15)`,
	`INSERT INTO tally.view_recount_runs VALUES (1, now64(3) - 100, now64(3) - 90, today() - 2, 'files', 120, 100, 40, 2)`,
	`INSERT INTO tally.view_recount_diffs VALUES
		(1, today() - 2, 'post-1', 10, 11, 1), (1, today() - 2, 'post-2', 20, 17, -3),
		(2, today() - 2, 'post-3', 5, 50, 45)`,
	`INSERT INTO tally.topk_snapshots VALUES
		('views', '1m', now64(3) - 120, 1, 'post-9', 50, true, 0),
		('views', '1m', now64(3) - 60, 1, 'post-1', 70, true, 0), ('views', '1m', now64(3) - 60, 2, 'post-2', 30, true, 0),
		('clicks', '24h', now64(3) - 60, 1, 'ad-1', 900, false, 12)`,
}

var tableRe = regexp.MustCompile(`\btally\.([A-Za-z_][A-Za-z0-9_]*)`)

// expandMacros replaces the Grafana ClickHouse data source's time macros as it does, with the
// range [from, to].
func expandMacros(q string, from, to time.Time) string {
	q = regexp.MustCompile(`\$__timeFilter\(([^)]+)\)`).ReplaceAllString(q,
		fmt.Sprintf("$1 >= toDateTime(%d) AND $1 <= toDateTime(%d)", from.Unix(), to.Unix()))
	q = strings.ReplaceAll(q, "$__fromTime", fmt.Sprintf("toDateTime(%d)", from.Unix()))
	return strings.ReplaceAll(q, "$__toTime", fmt.Sprintf("toDateTime(%d)", to.Unix()))
}

// TestDashboardQueries runs every ClickHouse query of the dashboards as the read-only
// dashboards user, on the migrated schema with data, and wants rows from each.
func TestDashboardQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := chclient.Open(ctx, chclient.Options{Addr: engine.Addr(), Database: "tally", Username: "default", Password: adminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Exec(ctx, "DROP DATABASE IF EXISTS tally"); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	if admin, err = chclient.Open(ctx, chclient.Options{Addr: engine.Addr(), Database: "tally", Username: "default", Password: adminPassword}); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Apply(ctx, admin, slogDiscard()); err != nil {
		t.Fatal(err)
	}
	// ClickHouse evaluates now64() once per row of a VALUES list, so two rows of one list could
	// get different instants (one top-K list read as two). Every seed row uses this one instant.
	at := time.Now().UTC().Truncate(time.Millisecond)
	instant := strings.NewReplacer(
		"now64(3)", fmt.Sprintf("toDateTime64('%s', 3, 'UTC')", at.Format("2006-01-02 15:04:05.000")),
		"now64(6)", fmt.Sprintf("toDateTime64('%s', 6, 'UTC')", at.Format("2006-01-02 15:04:05.000")),
		"now()", fmt.Sprintf("toDateTime('%s', 'UTC')", at.Format("2006-01-02 15:04:05")))
	for _, s := range seed {
		if err := admin.Exec(ctx, instant.Replace(s)); err != nil {
			t.Fatalf("seed %.60q: %v", s, err)
		}
	}
	tables := map[string]bool{}
	rows, err := admin.Query(ctx, "SELECT name FROM system.tables WHERE database = 'tally'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables[n] = true
	}
	rows.Close()

	reader, err := clickhouse.Open(&clickhouse.Options{Protocol: clickhouse.HTTP, Addr: []string{engine.Addr()},
		Auth: clickhouse.Auth{Database: "tally", Username: "dashboards"}})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	queries := map[string]string{} // file/panel -> SQL
	for file, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if p.Datasource.Type == "grafana-clickhouse-datasource" {
					if tg.RawSQL == "" {
						t.Errorf("%s %q: ClickHouse panel without rawSql", file, p.Title)
					}
					queries[file+"/"+p.Title] = tg.RawSQL
				}
			}
		}
	}
	covered := map[string]bool{}
	now := time.Now()
	for _, c := range dashboardQueries {
		key := c.file + "/" + c.panel
		covered[key] = true
		t.Run(key, func(t *testing.T) {
			q, ok := queries[key]
			if !ok {
				t.Fatalf("got no ClickHouse panel %q in %s; want the case to name one", c.panel, c.file)
			}
			var missing []string
			for _, m := range tableRe.FindAllStringSubmatch(q, -1) {
				if !tables[m[1]] && !slices.Contains(missing, m[1]) {
					missing = append(missing, m[1])
				}
			}
			if len(missing) > 0 {
				t.Fatalf("reads tables %v, which the migrations do not create", missing)
			}
			if n := countRows(t, ctx, reader, expandMacros(q, now.Add(-24*time.Hour), now.Add(time.Hour))); n == 0 {
				t.Errorf("got no rows; want the seeded data:\n%s", q)
			}
		})
	}
	// The seeded values each panel must show: unique viewers from the newest of a fold and a
	// sketch delta, final clicks only from the complete report
	// version, provisional ones without the checkpoint marker rows, the latest top-K list of
	// each kind and window, checkpoints only from the marker rows, and the recount's differences
	// only from its latest finished run.
	values := []struct{ key, sql, want string }{
		{"clicks-topk.json/Clicks per day: provisional vs final", "SELECT toString(sum(final)) || '/' || toString(sum(final_billable)) FROM (%s)", "16/15"},
		{"clicks-topk.json/Clicks per minute (provisional)", "SELECT toString(sum(provisional_clicks)) || '/' || toString(sum(provisional_billable)) FROM (%s)", "29/27"},
		{"clicks-topk.json/Top ads by clicks", "SELECT arrayStringConcat(groupArray(ad_id), ',') FROM (%s)", "ad-1,ad-2"},
		{"clicks-topk.json/Final daily click versions", "SELECT arrayStringConcat(groupArray(toString(version)), ',') FROM (%s)", "1"},
		{"clicks-topk.json/Top-K published (latest)", "SELECT arrayStringConcat(groupArray(key), ',') FROM (%s)", "post-1,post-2,ad-1"},
		{"clicks-topk.json/Clicks aggregator progress per partition", "SELECT arrayStringConcat(groupArray(toString(partition) || ':' || toString(clicks_offset) || '/' || toString(verdicts_offset)), ',') FROM (%s)", "0:40/3"},
		{"views.json/Top items by unique viewers today", "SELECT arrayStringConcat(groupArray(item_id || ':' || toString(unique_viewers)), ',') FROM (%s)", "post-1:6,post-2:2"},
		{"likes-batch.json/Views recount runs (versions)", "SELECT arrayStringConcat(groupArray(toString(version) || ':' || toString(differences)), ',') FROM (%s)", "1:2"},
		{"likes-batch.json/Views recount differences of the latest run", "SELECT arrayStringConcat(groupArray(item_id || ':' || toString(diff)), ',') FROM (%s)", "post-2:-3,post-1:1"},
	}
	for _, v := range values {
		t.Run(v.key+"/values", func(t *testing.T) {
			// Two days back, so yesterday's report is in range whatever the time of day.
			q := fmt.Sprintf(v.sql, expandMacros(queries[v.key], now.Add(-48*time.Hour), now.Add(time.Hour)))
			var got string
			if err := reader.QueryRow(ctx, q).Scan(&got); err != nil {
				t.Fatalf("query as dashboards: %v\n%s", err, q)
			}
			if got != v.want {
				t.Errorf("got %s; want %s", got, v.want)
			}
		})
	}
	for key := range queries {
		if !covered[key] {
			t.Errorf("dashboard query %s has no case in dashboardQueries; add one (with data in seed)", key)
		}
	}
}

func countRows(t *testing.T, ctx context.Context, conn driver.Conn, q string) int {
	t.Helper()
	rows, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatalf("query as dashboards: %v\n%s", err, q)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read rows: %v", err)
	}
	return n
}

// TestMigrationShapeIsChecked: a database migrated in one shape (one server, or ON CLUSTER) is
// refused by a process configured for the other, before any statement runs, naming both.
func TestMigrationShapeIsChecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tests := []struct {
		name      string
		prepare   string // creates schema_migrations as the other shape would have
		target    migrate.Target
		wantError string
	}{
		{"one-server database, cluster process", "", migrate.Target{Cluster: "tally"},
			"migrated for one server (clickhouse.cluster empty); this process is configured for cluster tally"},
		{"cluster database, one-server process",
			"CREATE TABLE schema_migrations (version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC')) ENGINE = ReplacingMergeTree ORDER BY version COMMENT 'tally migrations on cluster tally'",
			migrate.Target{}, "migrated for cluster tally (clickhouse.cluster); this process is configured for one server"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := fmt.Sprintf("shape_check_%d", i)
			opts := chclient.Options{Addr: engine.Addr(), Database: db, Username: "default", Password: adminPassword}
			conn, err := chclient.Open(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if tt.prepare == "" {
				if _, err := migrate.Apply(ctx, conn, slogDiscard()); err != nil {
					t.Fatal(err)
				}
			} else if err := conn.Exec(ctx, tt.prepare); err != nil {
				t.Fatal(err)
			}
			_, err = migrate.ApplyTo(ctx, conn, slogDiscard(), tt.target)
			if err == nil || !strings.Contains(err.Error(), tt.wantError) {
				t.Fatalf("got %v; want an error containing %q", err, tt.wantError)
			}
		})
	}
}
