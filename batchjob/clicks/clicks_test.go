package clicks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/batchjob/runlock"
	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/collector/reports"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process). Every test writes
// to the production topic names (the command reads those) under a day of its own, picked anew
// per process so a second go test -count run does not meet the first one's clicks; each test
// has its own database.
var (
	infra *testinfra.Infra
	bin   string // the batchjob binary
	base  time.Time
)

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error {
		infra = in
		base = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, 10*int(time.Now().UnixNano()%200))
		var err error
		bin, err = testinfra.Build(in.Dir, "github.com/tallypipeline/tally/batchjob/cmd/batchjob")
		return err
	}))
}

const partitions = 4

// Collector bounds the tests' data respects: produced at most this early or late.
const (
	early = 5 * time.Minute
	late  = 24 * time.Hour
)

func source() *KafkaSource {
	return NewKafkaSource(KafkaOptions{Brokers: []string{infra.Kafka.Addr()}, ClicksTopic: schemas.TopicClicks,
		VerdictsTopic: schemas.TopicFraudVerdicts, Early: early + time.Hour, Late: late + time.Hour, Logger: infra.Logger})
}

type fixture struct {
	day  time.Time
	conn driver.Conn
	// clickhouse are the command's flags that reach conn's engine and database.
	clickhouse []string
	rdb        *redis.Client
	api        *httptest.Server
}

func newFixture(t testing.TB, ctx context.Context, name string, dayOffset int) *fixture {
	t.Helper()
	db := "clicks_" + name
	return newFixtureOn(t, ctx, infra.DB(t, ctx, db), dayOffset,
		"--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword, "--clickhouse.database", db)
}

// newFixtureOn is newFixture on conn, which the command reaches with the flags clickhouse.
func newFixtureOn(t testing.TB, ctx context.Context, conn driver.Conn, dayOffset int, clickhouse ...string) *fixture {
	t.Helper()
	f := &fixture{day: base.AddDate(0, 0, dayOffset), conn: conn, clickhouse: clickhouse}
	f.rdb = redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	t.Cleanup(func() { f.rdb.Close() })
	if err := f.rdb.Del(ctx, LockKey).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Apply(ctx, f.conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	f.serveReports(t)
	return f
}

// serveReports serves the billing API on f.conn until the test ends.
func (f *fixture) serveReports(t testing.TB) {
	mux := http.NewServeMux()
	reports.New(reports.Options{ClickHouse: f.conn, Logger: infra.Logger}).Register(api.NewRouter(mux, prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Client().CloseIdleConnections(); srv.Close() })
	f.api = srv
}

func (f *fixture) deps() Deps {
	return Deps{Source: source(), ClickHouse: f.conn, Redis: f.rdb, LockTTL: 3 * time.Second, Lookback: 24 * time.Hour, Rules: Rules{FraudScoreThreshold: 1},
		Logger: infra.Logger, Now: time.Now}
}

func (f *fixture) args(extra ...string) []string {
	args := append(append([]string{}, extra...), f.clickhouse...)
	return append(args, "--kafka.brokers", infra.Kafka.Addr(), "--redis.addr", infra.Redis.Addr(), "--log.level", "info",
		"--collector.future_bound", early.String(), "--collector.late_bound", late.String())
}

// clickRec and verdictRec are records to produce: the collector stamps them when it produces,
// which is when the click or verdict arrived. Records of odd arrival milliseconds are in the
// format before Protobuf, as in a day the upgrade to it ran through.
func clickRec(c schemas.Click, arrived time.Time) *kgo.Record {
	return &kgo.Record{Topic: schemas.TopicClicks, Key: []byte(c.AdID), Value: encodingAt(arrived).AppendClick(nil, c), Timestamp: arrived}
}

func verdictRec(v schemas.FraudVerdict, arrived time.Time) *kgo.Record {
	return &kgo.Record{Topic: schemas.TopicFraudVerdicts, Key: []byte(v.AdID), Value: encodingAt(arrived).AppendFraudVerdict(nil, v), Timestamp: arrived}
}

func encodingAt(arrived time.Time) schemas.Encoding {
	return schemas.Encoding{V1: arrived.UnixMilli()%2 == 1}
}

// genDay makes a day's log: n clicks over ads ads, with repeats 30 s and 20 minutes later,
// repeats across both midnights, clicks of the days around, a click that arrives hours late,
// and fraud verdicts: plain, changed by a later decision that arrived first, repeated, and late.
func genDay(day time.Time, n, ads int, seed uint64) []*kgo.Record {
	r := rand.New(rand.NewPCG(seed, 7))
	var recs []*kgo.Record
	tag := day.Format("20060102")
	devices := []string{"phone", "desktop", "tablet"}
	device := "phone"
	click := func(id string, ad int, ts time.Time) schemas.Click {
		return schemas.Click{ClickID: id, AdID: fmt.Sprintf("ad-%s-%d", tag, ad), CampaignID: fmt.Sprintf("camp-%d", ad%3), UserHash: "u", IPHash: "ip",
			Device: device, TS: ts.UnixMilli()}
	}
	verdict := func(c schemas.Click, fraud bool, decided time.Time) schemas.FraudVerdict {
		v := schemas.FraudVerdict{ClickID: c.ClickID, AdID: c.AdID, Verdict: schemas.VerdictValid, Reason: "model v3", DecidedAt: decided.UnixMilli()}
		if fraud {
			v.Verdict, v.Reason = schemas.VerdictFraud, "bot pattern"
		}
		return v
	}
	for i := range n {
		ts := day.Add(time.Duration(r.Int64N(int64(24 * time.Hour))))
		device = devices[i%3]
		c := click(fmt.Sprintf("k-%s-%d", tag, i), i%ads, ts)
		recs = append(recs, clickRec(c, ts.Add(time.Duration(r.IntN(3000))*time.Millisecond)))
		switch {
		case i%7 == 0: // double tap, reported from another device: the first occurrence's counts
			device = devices[(i+1)%3]
			recs = append(recs, clickRec(click(c.ClickID, i%ads, ts.Add(30*time.Second)), ts.Add(31*time.Second)))
		case i%11 == 0: // the browser retried 20 minutes later
			recs = append(recs, clickRec(click(c.ClickID, i%ads, ts.Add(20*time.Minute)), ts.Add(20*time.Minute)))
		}
		switch {
		case i%13 == 0:
			recs = append(recs, verdictRec(verdict(c, true, ts.Add(time.Hour)), ts.Add(time.Hour)))
		case i%17 == 0: // fraud, then valid on review; the review arrived before the first decision
			recs = append(recs, verdictRec(verdict(c, false, ts.Add(3*time.Hour)), ts.Add(3*time.Hour)))
			recs = append(recs, verdictRec(verdict(c, true, ts.Add(time.Hour)), ts.Add(5*time.Hour)))
		case i%19 == 0: // the same verdict sent twice
			recs = append(recs, verdictRec(verdict(c, true, ts.Add(time.Hour)), ts.Add(time.Hour)))
			recs = append(recs, verdictRec(verdict(c, true, ts.Add(time.Hour)), ts.Add(2*time.Hour)))
		case i%23 == 0: // decided the next day
			recs = append(recs, verdictRec(verdict(c, true, day.Add(26*time.Hour)), day.Add(26*time.Hour)))
		}
	}
	device = "phone"
	// Across midnight: yesterday's click repeated today (not counted today), today's repeated
	// tomorrow (counted today, once).
	for j := range 20 {
		ts := day.Add(-5 * time.Minute)
		c := click(fmt.Sprintf("kb-%s-%d", tag, j), j%ads, ts)
		recs = append(recs, clickRec(c, ts), clickRec(click(c.ClickID, j%ads, ts.Add(15*time.Minute)), ts.Add(15*time.Minute)))
		ts = day.Add(24*time.Hour - 5*time.Minute)
		c = click(fmt.Sprintf("ka-%s-%d", tag, j), j%ads, ts)
		recs = append(recs, clickRec(c, ts), clickRec(click(c.ClickID, j%ads, ts.Add(15*time.Minute)), ts.Add(15*time.Minute)))
	}
	// Other days, and a click of the day that arrived 2 hours after it ended.
	for j := range 30 {
		ts := day.Add(-36 * time.Hour)
		recs = append(recs, clickRec(click(fmt.Sprintf("kp-%s-%d", tag, j), j%ads, ts), ts))
		ts = day.Add(30 * time.Hour)
		recs = append(recs, clickRec(click(fmt.Sprintf("kn-%s-%d", tag, j), j%ads, ts), ts))
	}
	ts := day.Add(24*time.Hour - 10*time.Minute)
	recs = append(recs, clickRec(click("kl-"+tag, 0, ts), day.Add(26*time.Hour)))
	// The log is in arrival order.
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Timestamp.Before(recs[j].Timestamp) })
	return recs
}

// produce writes recs stamped with their arrival times. The shared test producer cannot: it
// has a delivery timeout, which franz-go counts from a record's own timestamp.
func produce(t testing.TB, ctx context.Context, recs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(infra.Kafka.Addr()), kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafka.EnsureTopics(ctx, cl, partitions, schemas.TopicClicks, schemas.TopicFraudVerdicts); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readAll reads both topics whole, plainly, for the oracle.
func readAll(t testing.TB, ctx context.Context) (clicks []*kgo.Record, verdicts []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(infra.Kafka.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, schemas.TopicClicks, schemas.TopicFraudVerdicts)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]map[int32]int64{}
	from := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			if left[o.Topic] == nil {
				left[o.Topic], from[o.Topic] = map[int32]int64{}, map[int32]kgo.Offset{}
			}
			left[o.Topic][o.Partition] = o.Offset
			from[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	cl.AddConsumePartitions(from)
	for n := len(ends.Offsets()); n > 0; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Topic == schemas.TopicClicks {
				clicks = append(clicks, r)
			} else {
				verdicts = append(verdicts, r)
			}
			if r.Offset+1 >= end {
				delete(left[r.Topic], r.Partition)
			}
		})
		n = len(left[schemas.TopicClicks]) + len(left[schemas.TopicFraudVerdicts])
	}
	return clicks, verdicts
}

// oracle computes the day's rows from the whole log, the slow plain way: every occurrence of
// a click id sorted by (event time, partition, offset), the first one counted on its day for
// its ad, billable unless the verdict sorting first by (latest decided_at, fraud, latest in
// the log) is fraud.
func oracle(t *testing.T, ctx context.Context, day time.Time) []Row {
	t.Helper()
	var rows []Row
	for _, g := range oracleBy(t, ctx, day, func(c schemas.Click) string { return c.AdID }) {
		rows = append(rows, Row{AdID: g.Value, ExactCount: g.ExactCount, BillableCount: g.BillableCount})
	}
	return rows
}

// oracleBy is the oracle's count grouped by what key says of each click's first occurrence,
// sorted by it.
func oracleBy(t *testing.T, ctx context.Context, day time.Time, key func(schemas.Click) string) []Group {
	t.Helper()
	crecs, vrecs := readAll(t, ctx)
	type occ struct {
		c   schemas.Click
		p   int32
		off int64
	}
	byID := map[string][]occ{}
	for _, r := range crecs {
		c, err := schemas.DecodeClick(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		byID[c.ClickID] = append(byID[c.ClickID], occ{c, r.Partition, r.Offset})
	}
	type vocc struct {
		v   schemas.FraudVerdict
		p   int32
		off int64
	}
	verdicts := map[string][]vocc{}
	for _, r := range vrecs {
		v, err := schemas.DecodeFraudVerdict(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		verdicts[v.ClickID] = append(verdicts[v.ClickID], vocc{v, r.Partition, r.Offset})
	}
	exact, billable := map[string]uint64{}, map[string]uint64{}
	for id, os := range byID {
		sort.Slice(os, func(i, j int) bool {
			a, b := os[i], os[j]
			if a.c.TS != b.c.TS {
				return a.c.TS < b.c.TS
			}
			if a.p != b.p {
				return a.p < b.p
			}
			return a.off < b.off
		})
		first := os[0].c
		if first.TS < day.UnixMilli() || first.TS >= day.AddDate(0, 0, 1).UnixMilli() {
			continue
		}
		exact[key(first)]++
		vs := verdicts[id]
		sort.Slice(vs, func(i, j int) bool {
			a, b := vs[i], vs[j]
			if a.v.DecidedAt != b.v.DecidedAt {
				return a.v.DecidedAt > b.v.DecidedAt
			}
			if a.v.Verdict != b.v.Verdict {
				return a.v.Verdict == schemas.VerdictFraud
			}
			if a.p != b.p {
				return a.p > b.p
			}
			return a.off > b.off
		})
		if len(vs) == 0 || vs[0].v.Verdict != schemas.VerdictFraud {
			billable[key(first)]++
		}
	}
	var groups []Group
	for k, n := range exact {
		groups = append(groups, Group{Value: k, ExactCount: n, BillableCount: billable[k]})
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Value < groups[j].Value })
	return groups
}

// report reads a version of the day's report through the billing API, every page of it;
// version 0 asks for the latest. code is the API's status.
func (f *fixture) report(t *testing.T, version uint32) (reports.Daily, []Row, int) {
	t.Helper()
	var out reports.Daily
	var rows []Row
	after := ""
	for {
		u := fmt.Sprintf("%s/v1/reports/daily/%s?limit=1000&after=%s", f.api.URL, f.day.Format(time.DateOnly), after)
		if version > 0 {
			u += fmt.Sprintf("&version=%d", version)
		}
		resp, err := f.api.Client().Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return out, nil, resp.StatusCode
		}
		out = reports.Daily{} // a page without next_after must not keep the last one's
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		for _, a := range out.Ads {
			rows = append(rows, Row{AdID: a.AdID, ExactCount: a.ExactCount, BillableCount: a.BillableCount})
		}
		version = out.Version
		if after = out.NextAfter; after == "" {
			return out, rows, http.StatusOK
		}
	}
}

// groups reads the latest version's rows by campaign or device through the billing API, every
// page of it, two rows a page.
func (f *fixture) groups(t *testing.T, by string) []Group {
	t.Helper()
	var out []Group
	after := ""
	for {
		u := fmt.Sprintf("%s/v1/reports/daily/%s?by=%s&limit=2&after=%s", f.api.URL, f.day.Format(time.DateOnly), by, after)
		resp, err := f.api.Client().Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var d reports.Daily
		err = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d, %v", u, resp.StatusCode, err)
		}
		for _, g := range d.Groups {
			out = append(out, Group{Value: g.Value, ExactCount: g.ExactCount, BillableCount: g.BillableCount})
		}
		if after = d.NextAfter; after == "" {
			return out
		}
	}
}

// diffRows describes how got differs from want ("" when equal).
func diffRows(got, want []Row) string {
	if slices.Equal(got, want) {
		return ""
	}
	g := map[string]Row{}
	for _, r := range got {
		g[r.AdID] = r
	}
	var d []string
	for _, w := range want {
		if g[w.AdID] != w {
			d = append(d, fmt.Sprintf("%s: got %+v; want %+v", w.AdID, g[w.AdID], w))
		}
		delete(g, w.AdID)
	}
	for _, r := range g {
		d = append(d, fmt.Sprintf("%s: got %+v; want no row", r.AdID, r))
	}
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("... %d more", len(d)-5))
	}
	return fmt.Sprintf("%d rows vs %d: %s", len(got), len(want), strings.Join(d, "; "))
}

func TestRunMatchesOracle(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "oracle", 0)
	produce(t, ctx, genDay(f.day, 3000, 40, 1))
	want := oracle(t, ctx, f.day)

	rep, err := Run(ctx, f.day, f.deps())
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, r := range want {
		sum += r.ExactCount
	}
	// 3000 clicks of the day, 20 of today's counted across midnight, the late one; yesterday's
	// 20 repeated today are not: 3021.
	if rep.Version != 1 || rep.Day.Exact != 3021 || sum != 3021 || rep.Day.Ads != uint64(len(want)) {
		t.Fatalf("first run: got %s; want version 1 with 3021 clicks over %d ads (oracle sum %d)", rep.Summary(), len(want), sum)
	}
	// Duplicates on the day: 1/7 within a minute and 1/11 (not 1/7) 20 minutes later, whose
	// repeat stays on the day unless it passed midnight, plus yesterday's 20 repeated today.
	if rep.Day.Duplicates < 600 || rep.Day.Fraud == 0 {
		t.Fatalf("first run: got %s; want the duplicates and the not billed counted", rep.Summary())
	}
	d1, rows, code := f.report(t, 0)
	if code != 200 || d1.Version != 1 {
		t.Fatalf("report: got %d version %d; want 200 version 1", code, d1.Version)
	}
	if d := diffRows(rows, want); d != "" {
		t.Fatalf("version 1 vs the oracle: %s", d)
	}
	// The breakdown: each click under the campaign and the device of its first occurrence (a
	// double tap's repeat came from another device).
	for by, key := range map[string]func(schemas.Click) string{
		"campaign": func(c schemas.Click) string { return c.CampaignID },
		"device":   func(c schemas.Click) string { return c.Device },
	} {
		if got, want := f.groups(t, by), oracleBy(t, ctx, f.day, key); !slices.Equal(got, want) || len(want) != 3 {
			t.Fatalf("version 1 by %s: got %+v; want the oracle's %+v", by, got, want)
		}
	}

	// A rerun over the same log is version 2 with the same numbers.
	rep, err = Run(ctx, f.day, f.deps())
	if err != nil {
		t.Fatal(err)
	}
	d2, rows2, _ := f.report(t, 0)
	if rep.Version != 2 || d2.Version != 2 || d2.Totals != d1.Totals {
		t.Fatalf("rerun: got %s, API version %d totals %+v; want version 2 with totals %+v", rep.Summary(), d2.Version, d2.Totals, d1.Totals)
	}
	if d := diffRows(rows2, rows); d != "" {
		t.Fatalf("version 2 vs version 1: %s", d)
	}

	// A verdict arriving after that (the next evening) changes the next version only.
	c := want[0]
	id := billableClick(t, ctx, f.day, c.AdID)
	produce(t, ctx, []*kgo.Record{verdictRec(schemas.FraudVerdict{ClickID: id, AdID: c.AdID, Verdict: schemas.VerdictFraud,
		Reason: "chargeback", DecidedAt: f.day.Add(40 * time.Hour).UnixMilli()}, f.day.Add(40*time.Hour))})
	want3 := oracle(t, ctx, f.day)
	if want3[0].BillableCount != c.BillableCount-1 {
		t.Fatalf("oracle after the late verdict: got %+v; want %+v with one billable less", want3[0], c)
	}
	if rep, err = Run(ctx, f.day, f.deps()); err != nil {
		t.Fatal(err)
	}
	_, rows3, _ := f.report(t, 0)
	if d := diffRows(rows3, want3); rep.Version != 3 || d != "" {
		t.Fatalf("version %d after a late verdict vs the oracle: %s", rep.Version, d)
	}
	for v, wantRows := range map[uint32][]Row{1: want, 2: want} {
		if _, got, _ := f.report(t, v); diffRows(got, wantRows) != "" {
			t.Fatalf("version %d after version 3: %s; want it unchanged", v, diffRows(got, wantRows))
		}
	}
}

// billableClick returns a click id counted and billable for ad on day.
func billableClick(t *testing.T, ctx context.Context, day time.Time, ad string) string {
	t.Helper()
	ta := NewTally(day, Rules{FraudScoreThreshold: 1}, ad)
	if _, err := source().Clicks(ctx, day.Add(-24*time.Hour), day.AddDate(0, 0, 1), func(_ int64, cs []Click) error { ta.AddClicks(cs); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := source().Verdicts(ctx, day.Add(-24*time.Hour), func(_ int64, vs []Verdict) error { ta.AddVerdicts(vs); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, l := range ta.Audit() {
		if l.Status == StatusCounted && l.Verdict == "" {
			return l.ClickID
		}
	}
	t.Fatalf("no billable click without a verdict for %s", ad)
	return ""
}

// command runs the batchjob binary and returns its exit code and outputs.
func command(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

func TestCommandExitCodes(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "exit", 10)
	produce(t, ctx, genDay(f.day, 200, 5, 2))
	date := f.day.Format(time.DateOnly)
	var lock *runlock.Lock
	tests := []struct {
		name     string
		before   func()
		args     []string
		wantCode int
		wantOut  string // in stdout
		wantErr  string // in stderr
	}{
		{"unknown command", nil, f.args("bogus", "--date", date), 2, "", `unknown command "bogus"`},
		{"no date", nil, f.args("clicks"), 2, "", "give --date YYYY-MM-DD"},
		{"bad date", nil, f.args("clicks", "--date", "2026-13-01"), 2, "", `--date "2026-13-01": want YYYY-MM-DD`},
		{"audit without an ad", nil, f.args("clicks", "audit", "--date", date), 2, "", "audit needs --ad"},
		{"bad setting", nil, f.args("clicks", "--date", date, "--batchjob.clicks_lookback", "-1h"), 2, "", "batchjob.clicks_lookback"},
		{"help", nil, []string{"clicks", "--help"}, 0, "Sample crontab line", ""},
		{"another copy holds the lock", func() {
			var err error
			if lock, _, err = runlock.Acquire(ctx, f.rdb, LockKey, 10*time.Second, infra.Logger); err != nil {
				t.Fatal(err)
			}
		}, f.args("clicks", "--date", date), 3, "", "another run holds the lock " + LockKey},
		{"audit reads while the lock is held", nil, f.args("clicks", "audit", "--ad", "ad-"+f.day.Format("20060102")+"-1", "--date", date), 0,
			"no complete version stored yet", ""},
		{"after it finished", func() {
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}, f.args("clicks", "--date", date), 0, "click report " + date + " version 1: 5 ads", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before()
			}
			code, stdout, stderr := command(t, ctx, tt.args...)
			if code != tt.wantCode || !strings.Contains(stdout, tt.wantOut) || !strings.Contains(stderr, tt.wantErr) {
				t.Fatalf("got exit %d, stdout %q, stderr %q; want exit %d, %q in stdout, %q in stderr", code, stdout, stderr, tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
	if d, _, code := f.report(t, 0); code != 200 || d.Version != 1 {
		t.Fatalf("versions after the runs: got %d, version %d; want only the last run's version 1", code, d.Version)
	}
}

// kill -9 of the job while it runs leaves no version the API shows; the next run writes a
// complete one, equal to the oracle.
func TestKillMidRunThenRerun(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "kill", 20)
	// Many ads, so that the run is still writing when it is killed.
	produce(t, ctx, genDay(f.day, 100_000, 80_000, 3))
	want := oracle(t, ctx, f.day)
	// A short lock TTL, so that the dead run's lock ends soon; the rule checked is the same.
	args := append(f.args("clicks", "--date", f.day.Format(time.DateOnly)), "--batchjob.lock_ttl", "3s")

	cmd := exec.CommandContext(ctx, bin, args...)
	testinfra.StartUntil(t, cmd, "verdicts read")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	var partial uint64
	if err := f.conn.QueryRow(ctx, "SELECT count() FROM click_reports_daily WHERE date = ?", f.day).Scan(&partial); err != nil {
		t.Fatal(err)
	}
	d, _, code := f.report(t, 0)
	t.Logf("killed run left %d rows of %d; API: %d version %d", partial, len(want), code, d.Version)
	if code == 200 && d.Totals.Ads != uint64(len(want)) {
		t.Fatalf("after kill -9 the API shows version %d with %d ads; want no version or a complete one (%d ads)", d.Version, d.Totals.Ads, len(want))
	}

	// The dead run's lock stays until its TTL ends: a copy started at once is refused, as
	// cron's next attempt would be, and one started after the TTL runs.
	if code, _, stderrOut := command(t, ctx, args...); code != 3 {
		t.Fatalf("rerun right after kill -9: got exit %d (%s); want 3 while the dead run's lock lasts", code, stderrOut)
	}
	testinfra.WaitForEvery(t, time.Minute, time.Second, "the dead run's lock to expire", func() (bool, string) {
		n, err := f.rdb.Exists(ctx, LockKey).Result()
		return err == nil && n == 0, fmt.Sprint(n, err)
	})
	code, stdout, stderrOut := command(t, ctx, args...)
	if code != 0 {
		t.Fatalf("rerun: exit %d: %s", code, stderrOut)
	}
	d, rows, code := f.report(t, 0)
	if code != 200 || !strings.Contains(stdout, fmt.Sprintf("version %d:", d.Version)) {
		t.Fatalf("after the rerun: API %d version %d; stdout %q", code, d.Version, stdout)
	}
	if diff := diffRows(rows, want); diff != "" {
		t.Fatalf("version %d after kill -9 and a rerun vs the oracle: %s", d.Version, diff)
	}
}

func TestAuditCommand(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "audit", 30)
	produce(t, ctx, genDay(f.day, 500, 4, 4))
	want := oracle(t, ctx, f.day)
	if _, err := Run(ctx, f.day, f.deps()); err != nil {
		t.Fatal(err)
	}
	ad := want[1]
	code, stdout, stderr := command(t, ctx, f.args("clicks", "audit", "--ad", ad.AdID, "--date", f.day.Format(time.DateOnly))...)
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	wantHead := fmt.Sprintf("# ad %s on %s: recomputed from the log now: exact %d billable %d; stored version 1: exact %d billable %d (same)",
		ad.AdID, f.day.Format(time.DateOnly), ad.ExactCount, ad.BillableCount, ad.ExactCount, ad.BillableCount)
	if lines[0] != wantHead {
		t.Fatalf("audit summary: got %q; want %q", lines[0], wantHead)
	}
	status := map[string]uint64{}
	for _, l := range lines[2:] {
		if l == "" {
			break // the rejected records follow (TestAuditListsRejectedRecords)
		}
		fs := strings.Fields(l)
		status[fs[2]]++
		if fs[2] == "fraud" && fs[3] != "fraud" {
			t.Errorf("line %q: a fraud line without its fraud verdict", l)
		}
	}
	if status["counted"] != ad.BillableCount || status["counted"]+status["fraud"] != ad.ExactCount || status["duplicate"] == 0 {
		t.Fatalf("audit lines: got %v; want %d counted, %d fraud and some duplicates", status, ad.BillableCount, ad.ExactCount-ad.BillableCount)
	}
}
