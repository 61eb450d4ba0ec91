package recount_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/batchjob/recount"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/schemas/viewconf"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var (
	infra *testinfra.Infra
	bin   string
)

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error {
		infra = in
		var err error
		bin, err = testinfra.Build(in.Dir, "github.com/tallypipeline/tally/batchjob/cmd/batchjob")
		return err
	}))
}

const (
	window = 30 * time.Minute
	grace  = 10 * time.Minute
)

var day = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

type view struct {
	p       int32
	item    string
	viewer  string
	at      time.Duration // from the day's start
	counted bool          // by the streaming rule, in the day
}

// scenario is a day of views with the streaming rule's answers worked out by hand.
var scenario = []view{
	{0, "a", "u1", -10 * time.Minute, false}, // the day before: counts, but not in the day
	{0, "a", "u1", 5 * time.Minute, false},   // 15 min after it: duplicate
	{0, "a", "u1", 40 * time.Minute, true},   // 50 min after it: a new window
	{0, "a", "u1", 41 * time.Minute, false},  // duplicate
	{0, "a", "u2", 41 * time.Minute, true},   // another viewer
	{0, "b", "u1", 41 * time.Minute, true},   // another item
	{0, "b", "u1", 35 * time.Minute, false},  // late, 6 min before a counted view: duplicate
	{1, "a", "u1", 42 * time.Minute, true},   // another partition: its own window (never in practice: items are keyed)
	{1, "c", "u3", 23*time.Hour + 59*time.Minute, true},
	{1, "c", "u3", 24*time.Hour + 10*time.Minute, false}, // the next day: not counted in this one
}

type viewCount struct {
	item    string
	source  string
	seq     uint64
	n       uint64
	at      time.Duration
	counted bool
}

// countScenario are edge servers' view counts, after partition 0's views in its log.
var countScenario = []viewCount{
	{"a", "e1", 1, 100, -5 * time.Minute, false}, // the day before
	{"a", "e1", 1, 100, -5 * time.Minute, false}, // its retry
	{"e", "e1", 2, 300, 50 * time.Minute, true},
	{"e", "e1", 2, 300, 50 * time.Minute, false}, // a retry
	{"e", "e2", 2, 7, 50 * time.Minute, true},    // another source
	{"a", "e1", 3, 9, 51 * time.Minute, true},    // beside views of the item
}

// scenarioRecords is how many records the scenario writes.
var scenarioRecords = len(scenario) + len(countScenario)

func writeScenario(t *testing.T, st store.Store) map[string]int64 {
	t.Helper()
	topic, _ := rawlog.TopicByName(schemas.TopicViews)
	want := map[string]int64{}
	for p := range int32(2) {
		var values [][]byte
		for i, v := range scenario {
			if v.p != p {
				continue
			}
			// Every other view in the format before Protobuf, as in a day the upgrade ran through.
			enc := schemas.Encoding{V1: i%2 == 1}
			values = append(values, enc.AppendView(nil, schemas.View{ItemID: v.item, ViewerID: v.viewer, EventID: fmt.Sprint(i), TS: day.Add(v.at).UnixMilli()}))
			if v.counted {
				want[v.item]++
			}
		}
		for _, c := range countScenario {
			if p != 0 {
				break
			}
			values = append(values, schemas.AppendViewCount(nil, schemas.ViewCount{ItemID: c.item, Second: day.Add(c.at).Unix(), Count: c.n, SourceID: c.source, Seq: c.seq}))
			if c.counted {
				want[c.item] += int64(c.n)
			}
		}
		// Two flushes per partition, so the recount crosses files in offset order.
		half := len(values) / 2
		if err := rawlog.WriteFlush(st, topic, p, 0, values[:half]); err != nil {
			t.Fatal(err)
		}
		if err := rawlog.WriteFlush(st, topic, p, int64(half), values[half:]); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

func TestCountAppliesTheStreamingRule(t *testing.T) {
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := writeScenario(t, st)
	meter := progress.Start(progress.Options{Never: true})
	got, records, err := recount.Count(context.Background(), rawlog.Files[rawlog.ViewKey]{Store: st, Topic: schemas.TopicViews}, day, viewconf.Rules{DedupeWindow: window, DedupeGrace: grace}, time.Hour, meter)
	meter.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || records != uint64(scenarioRecords) {
		t.Fatalf("got %v from %d records; want %v from %d", got, records, want, scenarioRecords)
	}
	// The total is known before the read and is what the read found.
	if want := fmt.Sprintf("progress: %d/%d items (100%%)", scenarioRecords, scenarioRecords); !strings.HasPrefix(meter.Line(), want) {
		t.Errorf("progress: got %q; want it to start %q", meter.Line(), want)
	}
}

func TestRunReportsDifferencesInVersions(t *testing.T) {
	ctx := context.Background()
	conn := infra.DB(t, ctx, "recount_run")
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := store.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := writeScenario(t, st)
	// The streaming totals: a, c and e agree, b is one too many, d exists only in ClickHouse.
	if err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO views_total_by_day (item_id, day, views) VALUES
		('a', '2026-11-30', %d), ('b', '2026-11-30', %d), ('c', '2026-11-30', %d), ('d', '2026-11-30', 2), ('a', '2026-11-29', 7), ('e', '2026-11-30', %d)`,
		want["a"], want["b"]+1, want["c"], want["e"])); err != nil {
		t.Fatal(err)
	}
	deps := recount.Deps{Source: rawlog.Files[rawlog.ViewKey]{Store: st, Topic: schemas.TopicViews}, SourceName: "files", ClickHouse: conn,
		Rules: viewconf.Rules{DedupeWindow: window, DedupeGrace: grace}, Lookback: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now}
	rep, err := recount.Run(ctx, day, deps)
	if err != nil {
		t.Fatal(err)
	}
	wantDiffs := fmt.Sprint([]recount.Diff{{ItemID: "b", Files: want["b"], ClickHouse: want["b"] + 1}, {ItemID: "d", Files: 0, ClickHouse: 2}})
	if fmt.Sprint(rep.Diffs) != wantDiffs || rep.Version != 1 || rep.ItemsChecked != 5 {
		t.Fatalf("report: got version %d, %d items, diffs %v; want version 1, 5 items, diffs %s", rep.Version, rep.ItemsChecked, rep.Diffs, wantDiffs)
	}
	rep2, err := recount.Run(ctx, day, deps)
	if err != nil || rep2.Version != 2 {
		t.Fatalf("second run: got version %d, %v; want 2", rep2.Version, err)
	}
	var runs, diffs uint64
	if err := conn.QueryRow(ctx, "SELECT (SELECT count() FROM view_recount_runs), (SELECT count() FROM view_recount_diffs WHERE version = 2 AND item_id = 'b' AND diff = 1)").Scan(&runs, &diffs); err != nil {
		t.Fatal(err)
	}
	if runs != 2 || diffs != 1 {
		t.Fatalf("stored: got %d runs and %d diff rows for b in version 2; want 2 and 1", runs, diffs)
	}

	// The command: exit 4 and the summary line when items differ.
	cmd := exec.Command(bin, "views", "--date", "2026-11-30", "--sink.dir", dir, "--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword,
		"--clickhouse.database", "recount_run", "--redis.addr", "127.0.0.1:1", "--data_dir", filepath.Join(t.TempDir(), "data"))
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 4 || !strings.Contains(string(out), "view recount version 3 day 2026-11-30 from files") || !strings.Contains(string(out), "2 differences") {
		t.Fatalf("batchjob views: got exit %d (%v), output %q; want exit 4 and version 3 with 2 differences", code, err, out)
	}
	// A day the files do not cover is an error, not a clean report.
	cmd = exec.Command(bin, "views", "--date", "2026-10-01", "--sink.dir", dir, "--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword,
		"--clickhouse.database", "recount_run", "--redis.addr", "127.0.0.1:1", "--data_dir", filepath.Join(t.TempDir(), "data"))
	if _, err := cmd.Output(); cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("batchjob views of an uncovered day: got exit %d (%v); want 1", cmd.ProcessState.ExitCode(), err)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // date, or "error"
		rest int
	}{
		{"date", []string{"--date", "2026-11-30"}, "2026-11-30", 0},
		{"date with =, and a flag", []string{"--log.level=debug", "--date=2026-11-30"}, "2026-11-30", 1},
		{"no date", []string{}, "error", 0},
		{"bad date", []string{"--date", "30/11/2026"}, "error", 0},
		{"date without value", []string{"--date"}, "error", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, rest, err := recount.ParseArgs(tc.args)
			got := "error"
			if err == nil {
				got = d.Format(time.DateOnly)
			}
			if got != tc.want || len(rest) != tc.rest {
				t.Fatalf("got %s with %d settings args (%v); want %s with %d", got, len(rest), err, tc.want, tc.rest)
			}
		})
	}
}

// The stream's own tables must agree too: every rollup bucket of the day equals the deltas in it
// while view_deltas still holds the day. A bucket that does not (a repair that took views away,
// deltas lost after their rollups were written) is a difference of the report, like an item
// whose recount differs, and the command exits 4; once the deltas' TTL has passed over the day,
// the rollups cannot be compared and are not.
func TestRunReportsRollupsUnlikeTheDeltas(t *testing.T) {
	ctx := context.Background()
	const db = "recount_rollups"
	conn := infra.DB(t, ctx, db)
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	// A recent day: view_deltas expires its rows 7 days after their second.
	noon := testinfra.RecentNoon()
	day := noon.Truncate(24 * time.Hour)
	dir := t.TempDir()
	st, err := store.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	topic, _ := rawlog.TopicByName(schemas.TopicViews)
	views := []struct {
		item string
		at   time.Time
	}{
		{"r1", day.Add(-10 * time.Minute)}, // the day before: the files cover the lookback
		{"r1", noon}, {"r1", noon.Add(time.Minute)}, {"r2", noon}, {"r2", noon.Add(2 * time.Hour)}, {"r2", noon.Add(2*time.Hour + time.Second)},
	}
	var values [][]byte
	for i, v := range views {
		values = append(values, schemas.AppendView(nil, schemas.View{ItemID: v.item, ViewerID: fmt.Sprint("u", i), EventID: fmt.Sprint(i), TS: v.at.UnixMilli()}))
	}
	if err := rawlog.WriteFlush(st, topic, 0, 0, values); err != nil {
		t.Fatal(err)
	}
	// The stream's tables: the deltas of the day's views and rollups equal to them, but for a
	// bucket of views_by_hour that lacks 1 view of r2 and a bucket of views_by_minute that has 3
	// views of r1 the deltas do not (they lost them).
	for i, v := range views[1:] {
		if err := conn.Exec(ctx, `INSERT INTO view_deltas (partition, end_offset, watermark, item_id, second, views, epoch, rolled_up_to)
			VALUES (0, ?, now64(), ?, ?, 1, 1, 0)`, int64(i+1), v.item, v.at); err != nil {
			t.Fatal(err)
		}
		if err := conn.Exec(ctx, `INSERT INTO view_rollup_input (item_id, second, views) VALUES (?, ?, 1)`, v.item, v.at); err != nil {
			t.Fatal(err)
		}
	}
	hour := noon.Add(2 * time.Hour)
	for _, q := range []string{
		fmt.Sprintf("INSERT INTO views_by_hour (item_id, hour, views) VALUES ('r2', toDateTime(%d), -1)", hour.Unix()),
		fmt.Sprintf("INSERT INTO views_by_minute (item_id, minute, views) VALUES ('r1', toDateTime(%d), 3)", noon.Add(-time.Hour).Unix()),
	} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	wantRows := []string{
		fmt.Sprintf("views_by_hour/%s/r2 deltas 2 rollup 1", hour.Format(time.DateTime)),
		fmt.Sprintf("views_by_minute/%s/r1 deltas 0 rollup 3", noon.Add(-time.Hour).Format(time.DateTime)),
	}
	tests := []struct {
		name  string
		now   time.Time
		want  []string // rollup difference rows of the version
		items int      // differences of items

		ttlDays int // view_deltas' TTL set before the run (0: the migration's 7 days)
	}{
		{"the deltas hold the day", noon.Add(36 * time.Hour), wantRows, 0, 0},
		{"the deltas' TTL passed over the day", noon.Add(8 * 24 * time.Hour), nil, 0, 0},
		{"the table's longer TTL still holds the day", noon.Add(8 * 24 * time.Hour), wantRows, 0, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.ttlDays > 0 {
				q := fmt.Sprintf("ALTER TABLE view_deltas MODIFY TTL second + INTERVAL %d DAY SETTINGS materialize_ttl_after_modify = 0", tt.ttlDays)
				if err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			deps := recount.Deps{Source: rawlog.Files[rawlog.ViewKey]{Store: st, Topic: schemas.TopicViews}, SourceName: "files", ClickHouse: conn,
				Rules: viewconf.Rules{DedupeWindow: window, DedupeGrace: grace}, Lookback: time.Hour, Logger: infra.Logger, Now: func() time.Time { return tt.now }}
			rep, err := recount.Run(ctx, day, deps)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Diffs) != tt.items {
				t.Errorf("got item differences %v; want %d", rep.Diffs, tt.items)
			}
			if rep.RollupsCompared != (tt.want != nil) || len(rep.RollupDiffs) != len(tt.want) || rep.Differs() != (len(tt.want)+tt.items > 0) {
				t.Errorf("got rollups compared %v, %d rollup differences, differs %v; want %v, %d, %v",
					rep.RollupsCompared, len(rep.RollupDiffs), rep.Differs(), tt.want != nil, len(tt.want), len(tt.want)+tt.items > 0)
			}
			var got []string
			rows, err := conn.Query(ctx, "SELECT item_id, files, clickhouse FROM view_recount_diffs WHERE version = ? AND position(item_id, '/') > 0 ORDER BY item_id", rep.Version)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id string
				var deltas, rollup int64
				if err := rows.Scan(&id, &deltas, &rollup); err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%s deltas %d rollup %d", id, deltas, rollup))
			}
			rows.Close()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got rollup difference rows %q; want %q", got, tt.want)
			}
			var differences uint64
			if err := conn.QueryRow(ctx, "SELECT differences FROM view_recount_runs WHERE version = ?", rep.Version).Scan(&differences); err != nil {
				t.Fatal(err)
			}
			if want := uint64(len(tt.want) + tt.items); differences != want {
				t.Errorf("got %d differences in the run row; want %d", differences, want)
			}
		})
	}

	// The command: exit 4 when rollups differ, though every item agrees with the files.
	cmd := exec.Command(bin, "views", "--date", day.Format(time.DateOnly), "--sink.dir", dir, "--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword,
		"--clickhouse.database", db, "--redis.addr", "127.0.0.1:1", "--data_dir", filepath.Join(t.TempDir(), "data"))
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 4 || !strings.Contains(string(out), "0 differences, 2 rollup buckets unlike the deltas") {
		t.Fatalf("batchjob views: got exit %d (%v), output %q; want exit 4, 0 item differences and 2 rollup buckets", code, err, out)
	}
}
