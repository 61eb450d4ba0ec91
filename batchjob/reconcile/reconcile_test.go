package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	aggload "github.com/tallypipeline/tally/aggregator/likes"
	"github.com/tallypipeline/tally/batchjob/runlock"
	"github.com/tallypipeline/tally/collector/likes"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process); tests use their own
// topic and database and start from FLUSHALL (the like state's keys are global).
var (
	infra *testinfra.Infra
	bin   string // the batchjob binary
)

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error {
		infra = in
		var err error
		bin, err = testinfra.Build(in.Dir, "github.com/tallypipeline/tally/batchjob/cmd/batchjob")
		return err
	}))
}

type fixture struct {
	topic string
	conn  driver.Conn
	store *likestate.Store
	rdb   *redis.Client
}

func newFixture(t *testing.T, ctx context.Context, name string) *fixture {
	t.Helper()
	// A new topic each time: the broker lives as long as the test binary, so a second run of
	// the test (go test -count) would otherwise read the first run's records too.
	f := &fixture{topic: "likes-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	f.rdb = redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	t.Cleanup(func() { f.rdb.Close() })
	if err := f.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	f.store = likestate.NewStore(f.rdb)
	f.conn = infra.DB(t, ctx, "rec_"+name)
	if _, err := migrate.Apply(ctx, f.conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) deps() Deps {
	return Deps{Brokers: []string{infra.Kafka.Addr()}, Topic: f.topic, ClickHouse: f.conn, Store: f.store, Redis: f.rdb,
		LockTTL: 3 * time.Second, Logger: infra.Logger, Now: time.Now}
}

// produce writes likes to the fixture's topic.
func (f *fixture) produce(t *testing.T, ctx context.Context, ls []schemas.Like) {
	t.Helper()
	cl := infra.Producer(t, f.topic, 3)
	recs := make([]*kgo.Record, len(ls))
	for i, l := range ls {
		recs[i] = &kgo.Record{Topic: f.topic, Key: []byte(l.ItemID), Value: schemas.AppendLike(nil, l)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// oracle is the last record of every pair in log order.
func (f *fixture) oracle(t *testing.T, ctx context.Context) map[[2]string]record {
	t.Helper()
	out := map[[2]string]record{}
	if _, _, err := likestate.Replay(ctx, []string{infra.Kafka.Addr()}, f.topic, infra.Logger, func(recs []likestate.Record) error {
		for _, r := range recs {
			out[[2]string{r.Like.ItemID, r.Like.UserID}] = record{liked: r.Like.Liked, offset: r.Offset, ts: r.Like.TS}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// derive builds both derived stores the way production does: the collector's applier rebuilds
// Redis from the log, the aggregator's loader loads ClickHouse.
func (f *fixture) derive(t *testing.T, ctx context.Context, want map[[2]string]record) {
	t.Helper()
	reg := prometheus.NewRegistry()
	ap, err := likes.NewApplier(likes.ApplierConfig{Log: likestate.Log{Brokers: []string{infra.Kafka.Addr()}, Topic: f.topic, Group: f.topic + "-applier"},
		CheckEvery: 100 * time.Millisecond}, f.store, infra.Logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	ap.Start()
	ld, err := aggload.New(aggload.Config{Log: likestate.Log{Brokers: []string{infra.Kafka.Addr()}, Topic: f.topic, Group: f.topic + "-loader"},
		FlushInterval: 100 * time.Millisecond, MaxBatch: 1000}, f.conn, time.Now, infra.Logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	ld.Start()
	testinfra.WaitFor(t, 30*time.Second, "redis and clickhouse derived from the log", func() (bool, string) {
		if d := f.redisDiff(ctx, want); d != "" {
			return false, "redis: " + d
		}
		d := f.clickhouseDiff(ctx, want)
		return d == "", "clickhouse: " + d
	})
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := errors.Join(ap.Stop(sctx), ld.Stop(sctx)); err != nil {
		t.Fatal(err)
	}
}

func items(want map[[2]string]record) []string {
	var out []string
	for k := range want {
		if !slices.Contains(out, k[0]) {
			out = append(out, k[0])
		}
	}
	slices.Sort(out)
	return out
}

// redisDiff describes how Redis differs from the oracle ("" when it agrees).
func (f *fixture) redisDiff(ctx context.Context, want map[[2]string]record) string {
	its := items(want)
	states, err := f.store.ItemStates(ctx, its)
	if err != nil {
		return err.Error()
	}
	totals, err := f.store.Totals(ctx, its)
	if err != nil {
		return err.Error()
	}
	wantTotals := map[string]int64{}
	for k, r := range want {
		if states[k[0]].Pairs[k[1]].Liked != r.liked {
			return fmt.Sprintf("%v: got liked=%v; want %v", k, states[k[0]].Pairs[k[1]].Liked, r.liked)
		}
		if r.liked {
			wantTotals[k[0]]++
		}
	}
	for _, it := range its {
		if totals[it] != wantTotals[it] {
			return fmt.Sprintf("%s total: got %d; want %d", it, totals[it], wantTotals[it])
		}
	}
	return ""
}

// clickhouseDiff describes how the FINAL like records differ from the oracle's last records.
func (f *fixture) clickhouseDiff(ctx context.Context, want map[[2]string]record) string {
	rows, err := f.conn.Query(ctx, "SELECT item_id, user_id, liked, offset FROM likes FINAL")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	got := map[[2]string]record{}
	for rows.Next() {
		var item, user string
		var liked uint8
		var off int64
		if err := rows.Scan(&item, &user, &liked, &off); err != nil {
			return err.Error()
		}
		got[[2]string{item, user}] = record{liked: liked == 1, offset: off}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("got %d pairs; want %d", len(got), len(want))
	}
	for k, r := range want {
		if g := got[k]; g.liked != r.liked || g.offset != r.offset {
			return fmt.Sprintf("%v: got %+v; want %+v", k, g, r)
		}
	}
	return ""
}

// genLikes makes n changes over 6 items and 15 users: items 0-2 change on day, 3-5 the day
// before, with several records per pair so the last one decides.
func genLikes(n int, day time.Time) []schemas.Like {
	out := make([]schemas.Like, n)
	for i := range out {
		item := i % 6
		ts := day.Add(time.Duration(i) * time.Second)
		if item >= 3 {
			ts = ts.AddDate(0, 0, -1)
		}
		out[i] = schemas.Like{ItemID: fmt.Sprintf("item-%d", item), UserID: fmt.Sprintf("user-%d", (i/6)%15), Liked: (i/90)%2 == 0 || (i/6)%3 == 0, TS: ts.UnixMilli()}
	}
	return out
}

type runRow struct {
	Version                             uint64
	Scope                               string
	ItemsChecked, Differences, Repaired uint64
}

func (f *fixture) runs(t *testing.T, ctx context.Context) []runRow {
	t.Helper()
	rows, err := f.conn.Query(ctx, "SELECT version, scope, items_checked, differences, repaired FROM like_reconciliation_runs ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		if err := rows.Scan(&r.Version, &r.Scope, &r.ItemsChecked, &r.Differences, &r.Repaired); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

type diffRow struct {
	Item, Source           string
	Expected, Actual, Diff int64
	Repaired               uint8
}

func (f *fixture) diffs(t *testing.T, ctx context.Context, version uint64) []diffRow {
	t.Helper()
	rows, err := f.conn.Query(ctx, `SELECT item_id, toString(source), expected, actual, diff, repaired FROM like_reconciliation_diffs
		WHERE version = ? ORDER BY source, item_id`, version)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []diffRow
	for rows.Next() {
		var d diffRow
		if err := rows.Scan(&d.Item, &d.Source, &d.Expected, &d.Actual, &d.Diff, &d.Repaired); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func TestReconcileFindsAndRepairsDrift(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "drift")
	day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	f.produce(t, ctx, genLikes(360, day))
	want := f.oracle(t, ctx)
	f.derive(t, ctx, want)

	// A clean run finds nothing; a run for one day checks only that day's items.
	for i, job := range []Job{{All: true}, {Date: day}} {
		rep, err := Run(ctx, job, f.deps())
		if err != nil {
			t.Fatal(err)
		}
		wantItems := map[bool]uint64{true: 6, false: 3}[job.All]
		if rep.Version != uint64(i+1) || rep.Differences != 0 || rep.ItemsChecked != wantItems || rep.Records != 360 {
			t.Fatalf("clean run %s: got %s; want version %d, 0 differences, %d items, 360 records", job.Scope(), rep.Summary(), i+1, wantItems)
		}
	}

	// Drift behind the scripts' backs: a liker removed from Redis, a phantom liker added there,
	// an item's total key off by 5 with every pair right, a phantom liked row and a lost row in
	// ClickHouse.
	liked, lostRow := pairWith(want, "item-1", true), pairWith(want, "item-4", true)
	if err := f.rdb.SRem(ctx, likestate.UsersKey("item-1", likestate.Shard(liked)), liked).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.SAdd(ctx, likestate.UsersKey("item-2", likestate.Shard("ghost")), "ghost").Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.IncrBy(ctx, likestate.TotalKey("item-5"), 5).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.conn.Exec(ctx, "INSERT INTO likes (item_id, user_id, liked, partition, offset, ts) VALUES ('item-3', 'ghost', 1, 0, 1, now64(3))"); err != nil {
		t.Fatal(err)
	}
	if err := f.conn.Exec(ctx, "DELETE FROM likes WHERE item_id = 'item-4' AND user_id = ?", lostRow); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, Job{All: true}, f.deps())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != 3 || rep.Differences != 5 || rep.Repaired != 5 {
		t.Fatalf("run after drift: got %s; want version 3 with 5 differences, 5 repaired", rep.Summary())
	}
	total := func(item string) int64 {
		var n int64
		for k, r := range want {
			if k[0] == item && r.liked {
				n++
			}
		}
		return n
	}
	wantDiffs := []diffRow{
		{"item-3", "clickhouse", total("item-3"), total("item-3") + 1, 1, 1},
		{"item-4", "clickhouse", total("item-4"), total("item-4") - 1, -1, 1},
		{"item-1", "redis", total("item-1"), total("item-1") - 1, -1, 1},
		{"item-2", "redis", total("item-2"), total("item-2") + 1, 1, 1},
		{"item-5", "redis", total("item-5"), total("item-5") + 5, 5, 1},
	}
	if got := f.diffs(t, ctx, 3); !slices.Equal(got, wantDiffs) {
		t.Fatalf("diffs of version 3: got %+v; want %+v", got, wantDiffs)
	}
	if d := f.redisDiff(ctx, want); d != "" {
		t.Errorf("redis after the repair: %s", d)
	}
	if d := f.clickhouseDiff(ctx, want); d != "" {
		t.Errorf("clickhouse after the repair: %s", d)
	}

	// A rerun is a new version that finds the repaired state clean; history is unchanged.
	rep, err = Run(ctx, Job{All: true}, f.deps())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != 4 || rep.Differences != 0 {
		t.Fatalf("rerun: got %s; want version 4 with 0 differences", rep.Summary())
	}
	wantRuns := []runRow{{1, "all", 6, 0, 0}, {2, "date:2026-11-28", 3, 0, 0}, {3, "all", 6, 5, 5}, {4, "all", 6, 0, 0}}
	if got := f.runs(t, ctx); !slices.Equal(got, wantRuns) {
		t.Fatalf("runs: got %+v; want %+v", got, wantRuns)
	}
}

// pairWith returns a user of item whose last state is liked.
func pairWith(want map[[2]string]record, item string, liked bool) string {
	var users []string
	for k, r := range want {
		if k[0] == item && r.liked == liked {
			users = append(users, k[1])
		}
	}
	slices.Sort(users)
	return users[0]
}

// A second copy started while one holds the lock exits 3 without touching anything; once the
// lock is free the command runs and exits 0.
func TestSecondCopyExitsLocked(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "lock")
	lock, _, err := runlock.Acquire(ctx, f.rdb, LockKey, 5*time.Second, infra.Logger)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(ctx, Job{All: true}, f.deps()); !errors.Is(err, runlock.ErrLocked) {
		t.Fatalf("in-process run while locked: got %v; want ErrLocked", err)
	}
	args := []string{"likes", "--all", "--kafka.brokers", infra.Kafka.Addr(), "--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword,
		"--clickhouse.database", "rec_lock", "--redis.addr", infra.Redis.Addr(), "--log.level", "warn"}
	tests := []struct {
		name     string
		before   func()
		wantCode int
		wantOut  string
	}{
		{"while another copy runs", func() {}, 3, ""},
		{"after it finished", func() {
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}, 0, "like reconciliation version 1 scope all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.before()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) {
				t.Fatalf("got exit %d, stdout %q; want exit %d with %q (stderr: %s)", code, stdout.String(), tt.wantCode, tt.wantOut, stderr.String())
			}
		})
	}
	if got := f.runs(t, ctx); len(got) != 1 {
		t.Fatalf("got %d runs recorded; want 1 (the locked copy writes nothing)", len(got))
	}
}
