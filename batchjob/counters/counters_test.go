package counters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process). The tests write to
// the production topic (the command reads it) under a day picked anew per process and
// namespaces of their own; each test has its own database.
var (
	infra *testinfra.Infra
	bin   string // the batchjob binary
	base  time.Time
)

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error {
		infra = in
		base = time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, 10*int(time.Now().UnixNano()%200))
		var err error
		bin, err = testinfra.Build(in.Dir, "github.com/tallypipeline/tally/batchjob/cmd/batchjob")
		return err
	}))
}

// logged is a record of the log: the event and when it arrived (its produce time).
type logged struct {
	e       schemas.CounterEvent
	arrived time.Time
}

// produce writes recs stamped with their arrival times, each keyed as the collector keys it.
// The shared test producer cannot: it has a delivery timeout, which franz-go counts from a
// record's own timestamp.
func produce(t *testing.T, ctx context.Context, log []logged) {
	t.Helper()
	cl := producer(t, ctx)
	for _, l := range log {
		rec := &kgo.Record{Topic: schemas.TopicCounterEvents, Key: schemas.CounterKey(l.e.Namespace, l.e.Name), Timestamp: l.arrived,
			Value: schemas.AppendCounterEvent(nil, l.e)}
		if l.e.Namespace == "" {
			rec.Value = []byte("not json")
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// producer is a client for the log's topic, created if missing, closed when the test ends.
func producer(t *testing.T, ctx context.Context) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(infra.Kafka.Addr()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := kafka.EnsureTopics(ctx, cl, 4, schemas.TopicCounterEvents); err != nil {
		t.Fatal(err)
	}
	return cl
}

// fixture is a namespace in a database of its own.
type fixture struct {
	ns   string
	db   string
	conn driver.Conn
	// clickhouse are the command's flags that reach conn's engine and database.
	clickhouse []string
}

func newFixture(t *testing.T, ctx context.Context, name, mode string) *fixture {
	t.Helper()
	f := &fixture{db: "counters_" + name}
	f.conn = infra.DB(t, ctx, f.db)
	f.clickhouse = []string{"--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword, "--clickhouse.database", f.db}
	if _, err := migrate.Apply(ctx, f.conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	f.ns = f.namespace(t, ctx, name, mode)
	return f
}

// namespace creates a namespace named for name, unique to the process, at generation 7 with a
// one-hour window.
func (f *fixture) namespace(t *testing.T, ctx context.Context, name, mode string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	if err := f.conn.Exec(ctx, `INSERT INTO counter_namespaces (name, mode, retention_s, idempotency_s, writers, readers, generation, deleted, version, changed_at)
		VALUES (?, ?, 7776000, 3600, [], [], 7, 0, 7, now64())`, ns, mode); err != nil {
		t.Fatal(err)
	}
	return ns
}

// argv is the command's arguments to recount day with args.
func (f *fixture) argv(day time.Time, args ...string) []string {
	argv := append([]string{"counters", "--date", day.Format(time.DateOnly)}, args...)
	argv = append(argv, f.clickhouse...)
	return append(argv, "--kafka.brokers", infra.Kafka.Addr(), "--redis.addr", infra.Redis.Addr(), "--log.level", "info")
}

// run runs the command on day with args and returns its exit code and output.
func (f *fixture) run(t *testing.T, day time.Time, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, f.argv(day, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, out.String()
}

// store writes a row of counter_deltas as the stream would have: delta to counter name of
// namespace ns in the minute at.
func (f *fixture) store(t *testing.T, ctx context.Context, ns, name string, at time.Time, delta int64) {
	t.Helper()
	if err := f.conn.Exec(ctx, `INSERT INTO counter_deltas (partition, epoch, end_offset, ns, generation, name, minute, delta, expires)
		VALUES (0, 1, 1, ?, 7, ?, ?, ?, now() + INTERVAL 90 DAY)`, ns, name, at.Truncate(time.Minute), delta); err != nil {
		t.Fatal(err)
	}
}

type reportRow struct {
	adds, end, stored int64
	clears            uint32
	dups              uint64
}

// report reads the latest complete version of namespace ns's day.
func (f *fixture) report(t *testing.T, ctx context.Context, ns string, day time.Time) (uint32, map[string]reportRow) {
	t.Helper()
	rows, err := f.conn.Query(ctx, `SELECT version, name, adds, clears, duplicates, end_count, stored FROM counter_reports_final WHERE ns = ? AND date = ?`, ns, day)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var version uint32
	out := map[string]reportRow{}
	for rows.Next() {
		var name string
		var r reportRow
		if err := rows.Scan(&version, &name, &r.adds, &r.clears, &r.dups, &r.end, &r.stored); err != nil {
			t.Fatal(err)
		}
		out[name] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return version, out
}

// TestRecountAgreesThenFindsADifference recounts a day whose log holds retries within the
// window (one of an add counted the day before), a clear, an add that arrived two hours after
// the day, the next day's adds, another generation's and an undecodable record, against the
// rows the stream stored for it: the versions agree, for it and for an accurate namespace of
// the same run (a best_effort one is passed over). Then a batch stored twice (what an
// exactly-once bug would leave) is found and named in version 2.
func TestRecountAgreesThenFindsADifference(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "shares", "eventual")
	day := base
	ev := func(op, name string, delta int64, token string, at time.Duration) schemas.CounterEvent {
		return schemas.CounterEvent{Op: op, Namespace: f.ns, Generation: 7, Name: name, Delta: delta, Token: token,
			TS: day.Add(at).UnixMilli(), Window: time.Hour.Milliseconds(), Retention: 90 * 86400}
	}
	at := func(e schemas.CounterEvent, after time.Duration) logged {
		return logged{e, time.UnixMilli(e.TS).Add(after)}
	}
	other := ev(schemas.CounterAdd, "a", 9, "g6", time.Hour)
	other.Generation = 6
	exact := f.namespace(t, ctx, "exact", "accurate")
	f.namespace(t, ctx, "loose", "best_effort")
	inExact := ev(schemas.CounterAdd, "a", 4, "t1", time.Hour) // the same name and token in another namespace
	inExact.Namespace = exact
	f.store(t, ctx, exact, "a", day.Add(time.Hour), 4)
	produce(t, ctx, []logged{
		at(ev(schemas.CounterAdd, "a", 10, "prev", -20*time.Minute), 0),
		at(ev(schemas.CounterAdd, "a", 10, "prev", 10*time.Minute), 0), // a retry stamped on arrival, on the day: dropped
		at(ev(schemas.CounterAdd, "a", 5, "t1", time.Hour), 0),
		at(ev(schemas.CounterAdd, "a", 5, "t1", time.Hour), time.Second),
		at(ev(schemas.CounterAdd, "a", -2, "t2", 2*time.Hour), 0),
		at(other, 0),
		{schemas.CounterEvent{}, day.Add(2 * time.Hour)}, // undecodable
		at(ev(schemas.CounterAdd, "b", 4, "t3", time.Hour), 0),
		at(ev(schemas.CounterClear, "b", 0, "c1", 3*time.Hour), 0),
		at(ev(schemas.CounterAdd, "b", 6, "t4", 4*time.Hour), 0),
		at(ev(schemas.CounterAdd, "a", 1, "t5", 25*time.Hour), 0),                                         // the next day's
		at(ev(schemas.CounterAdd, "c", 7, "t6", 23*time.Hour+50*time.Minute), 2*time.Hour+10*time.Minute), // arrived after the day
		// Last: on the partition of a, earlier, its time would move the dedupe watermark past the
		// add of "prev", which the rule would then forget at once (TestReplay).
		at(inExact, 27*time.Hour),
	})
	for _, s := range []struct {
		name  string
		at    time.Duration
		delta int64
	}{{"a", -20 * time.Minute, 10}, {"a", time.Hour, 5}, {"a", 2 * time.Hour, -2}, {"a", 25 * time.Hour, 1},
		{"b", -48 * time.Hour, 50}, {"b", time.Hour, 4}, {"b", 3 * time.Hour, -54}, {"b", 4 * time.Hour, 6},
		{"c", 23*time.Hour + 50*time.Minute, 7}} {
		f.store(t, ctx, f.ns, s.name, day.Add(s.at), s.delta)
	}

	code, out := f.run(t, day)
	if code != 0 {
		t.Fatalf("got exit %d; want 0:\n%s", code, out)
	}
	want := map[string]reportRow{
		"a": {adds: 3, end: 13, stored: 13, dups: 2},
		"b": {adds: 10, clears: 1, end: 6, stored: 6},
		"c": {adds: 7, end: 7, stored: 7},
	}
	version, got := f.report(t, ctx, f.ns, day)
	if version != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got version %d %+v; want 1 %+v", version, got, want)
	}
	wantExact := map[string]reportRow{"a": {adds: 4, end: 4, stored: 4}}
	if version, got := f.report(t, ctx, exact, day); version != 1 || fmt.Sprint(got) != fmt.Sprint(wantExact) {
		t.Fatalf("got version %d %+v of %s; want 1 %+v", version, got, exact, wantExact)
	}
	if n := strings.Count(out, "counter report "); n != 2 || !strings.Contains(out, f.ns+" "+day.Format(time.DateOnly)+" version 1: 3 counters, 0 differ from the stream") {
		t.Fatalf("got output\n%s\nwant two summaries, %s's of 3 counters, none differing", out, f.ns)
	}

	f.store(t, ctx, f.ns, "a", day.Add(time.Hour), 5) // a batch counted twice
	code, out = f.run(t, day, "--namespace", f.ns)
	if code != 4 {
		t.Fatalf("got exit %d; want 4 (differences):\n%s", code, out)
	}
	want["a"] = reportRow{adds: 3, end: 13, stored: 18, dups: 2}
	if version, got = f.report(t, ctx, f.ns, day); version != 2 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got version %d %+v; want 2 %+v", version, got, want)
	}
	if !strings.Contains(out, "1 differ from the stream") || !strings.Contains(out, `name=a recount=13 stored=18`) {
		t.Fatalf("got output\n%s\nwant counter a named as differing", out)
	}
}

func TestRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		name, mode string
		drop       bool
		want       string
	}{
		{"besteffort", "best_effort", false, "is best_effort: its counts live in Redis alone"},
		{"gone", "eventual", true, "does not exist (or was deleted)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, ctx, tt.name, tt.mode)
			if tt.drop {
				if err := f.conn.Exec(ctx, `INSERT INTO counter_namespaces (name, mode, retention_s, idempotency_s, writers, readers, generation, deleted, version, changed_at)
					VALUES (?, 'eventual', 7776000, 3600, [], [], 7, 1, 8, now64())`, f.ns); err != nil {
					t.Fatal(err)
				}
			}
			code, out := f.run(t, base, "--namespace", f.ns)
			if code != 1 || !strings.Contains(out, tt.want) {
				t.Fatalf("got exit %d and\n%s\nwant exit 1 saying %q", code, out, tt.want)
			}
		})
	}
}

// kill -9 of the job at a random moment of its run (reading the log, reading the stored totals
// or writing its rows) leaves the last complete version or none visible, never a part of one;
// the dead run's lock refuses a rerun until its TTL ends, and the rerun writes a complete version.
func TestKillAtRandomThenRerun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "kill", "eventual")
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	defer rdb.Close()
	day := base.AddDate(0, 0, 3) // a day of its own: the other tests' records are not read
	f.seed(t, ctx, day, killCounters)
	args := []string{"--namespace", f.ns, "--batchjob.lock_ttl", "3s"}

	// The first run: how long the whole run and its write (from the line below to its exit) take.
	took, writeTook := f.timeRun(t, ctx, day, args)
	seen := f.complete(t, ctx, day, "after the first run")

	kills := []struct {
		name  string
		after string // the log line the delay starts at; "" for the start
		delay time.Duration
	}{
		{"anywhere in the run", "", time.Duration(rand.Int64N(int64(took)))},
		{"while writing its rows", writing, time.Duration(rand.Int64N(int64(writeTook)))},
	}
	for _, k := range kills {
		t.Run(k.name, func(t *testing.T) {
			f.kill(t, ctx, f.argv(day, args...), k.after, k.delay)
			t.Logf("killed %v after %q (a whole run took %v): it left %d rows beyond version %d", k.delay, k.after, took, f.beyond(t, ctx, day, seen), seen)
			seen = f.complete(t, ctx, day, "after kill -9")
			if code, out := f.run(t, day, args...); code != 3 && code != 0 {
				t.Fatalf("rerun at once: got exit %d; want 3 while the dead run's lock lasts, or 0 if it ended before the kill:\n%s", code, out)
			}
			testinfra.WaitForEvery(t, 30*time.Second, time.Second, "the dead run's lock to expire", func() (bool, string) {
				n, err := rdb.Exists(ctx, LockKey).Result()
				return err == nil && n == 0, fmt.Sprint(n, err)
			})
			seen = f.rerun(t, ctx, day, args, seen)
		})
	}
}

// killCounters is how many counters the kill tests' report holds: rows enough for its write to
// take a while (two INSERTs of rowsPerInsert).
const killCounters = 150_000

// writing is the line the command logs before it writes a report.
const writing = "writing counter report"

// seed logs one add of 1 to each of n counters of f's namespace on day, and stores the same in
// counter_deltas, so that a run finds them all equal.
func (f *fixture) seed(t *testing.T, ctx context.Context, day time.Time, n int) {
	t.Helper()
	produceAdds(t, ctx, f.ns, day, n)
	if err := f.conn.Exec(ctx, `INSERT INTO counter_deltas (partition, epoch, end_offset, ns, generation, name, minute, delta, expires)
		SELECT 0, 1, 1, ?, 7, concat('c', toString(number)), ?, 1, now() + INTERVAL 90 DAY FROM numbers(?)`, f.ns, day.Add(time.Hour), n); err != nil {
		t.Fatal(err)
	}
}

// timeRun runs the command to its end and returns how long the whole run and its write (from
// the writing line to its exit) took.
func (f *fixture) timeRun(t *testing.T, ctx context.Context, day time.Time, args []string) (run, write time.Duration) {
	t.Helper()
	started := time.Now()
	cmd := exec.CommandContext(ctx, bin, f.argv(day, args...)...)
	testinfra.StartUntil(t, cmd, writing)
	wrote := time.Now()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	return time.Since(started), time.Since(wrote)
}

// complete checks, in the engine (reading killCounters rows into the test costs seconds under
// -race), that the visible version of day's report holds every counter, each with its one add,
// and returns the version.
func (f *fixture) complete(t *testing.T, ctx context.Context, day time.Time, when string) uint32 {
	t.Helper()
	var version uint32
	var rows, right uint64
	if err := f.conn.QueryRow(ctx, `SELECT any(version), count(), countIf(adds = 1 AND clears = 0 AND duplicates = 0 AND end_count = 1 AND stored = 1)
		FROM counter_reports_final WHERE ns = ? AND date = ?`, f.ns, day).Scan(&version, &rows, &right); err != nil {
		t.Fatal(err)
	}
	if rows != killCounters || right != killCounters {
		t.Fatalf("%s: got version %d with %d counters, %d of them 1 add, end 1, stored 1; want a complete version of %d", when, version, rows, right, killCounters)
	}
	return version
}

// beyond returns how many report rows of day a dead run left beyond version seen.
func (f *fixture) beyond(t *testing.T, ctx context.Context, day time.Time, seen uint32) uint64 {
	t.Helper()
	var n uint64
	if err := f.conn.QueryRow(ctx, `SELECT count() FROM counter_reports_daily WHERE ns = ? AND date = ? AND version > ?`, f.ns, day, seen).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rerun runs the command again, expects it to write a complete version newer than seen and say
// so, and returns that version.
func (f *fixture) rerun(t *testing.T, ctx context.Context, day time.Time, args []string, seen uint32) uint32 {
	t.Helper()
	code, out := f.run(t, day, args...)
	if code != 0 {
		t.Fatalf("rerun: got exit %d; want 0:\n%s", code, out)
	}
	version := f.complete(t, ctx, day, "after the rerun")
	if version <= seen || !strings.Contains(out, fmt.Sprintf("version %d: %d counters, 0 differ", version, killCounters)) {
		t.Fatalf("after the rerun: got version %d (%d before it) and output\n%s\nwant a newer complete version, reported", version, seen, out)
	}
	return version
}

// kill starts the command with argv and kill -9s it delay after it logs a line containing after
// (after its start for "").
func (f *fixture) kill(t *testing.T, ctx context.Context, argv []string, after string, delay time.Duration) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, argv...)
	testinfra.StartUntil(t, cmd, after)
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// produceAdds logs one add of 1 to each of n counters c0, c1, ... of ns, an hour into day.
func produceAdds(t *testing.T, ctx context.Context, ns string, day time.Time, n int) {
	t.Helper()
	cl := producer(t, ctx)
	at := day.Add(time.Hour)
	var failed atomic.Pointer[error]
	for i := range n {
		e := schemas.CounterEvent{Op: schemas.CounterAdd, Namespace: ns, Generation: 7, Name: fmt.Sprintf("c%d", i), Delta: 1,
			Token: fmt.Sprintf("t%d", i), TS: at.UnixMilli(), Window: time.Hour.Milliseconds(), Retention: 90 * 86400}
		cl.Produce(ctx, &kgo.Record{Topic: schemas.TopicCounterEvents, Key: schemas.CounterKey(ns, e.Name), Timestamp: at,
			Value: schemas.AppendCounterEvent(nil, e)}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := failed.Load(); err != nil {
		t.Fatal(*err)
	}
}
