package clicks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One infrastructure per test binary (chDB allows one engine per process).
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

func openMigrated(t *testing.T, ctx context.Context, db string) driver.Conn {
	t.Helper()
	conn := infra.DB(t, ctx, db)
	if _, err := migrate.Apply(ctx, conn, infra.Logger); err != nil {
		t.Fatal(err)
	}
	return conn
}

// base is the clock of the log: recent, for the click tables' TTLs.
var base = testinfra.RecentNoon()

// event is one record of the log of one partition: a click or a verdict.
type event struct {
	click   *schemas.Click
	verdict *schemas.FraudVerdict
}

// clk is a click of ad; its campaign follows from the ad (two campaigns share the ads) and its
// device from the click id, so that retries of a click carry the same ones.
func clk(ad, id string, at time.Duration, score float64) event {
	c := schemas.Click{ClickID: id, AdID: ad, CampaignID: campaignOf(ad), UserHash: "u", IPHash: "i", Device: deviceOf(id), TS: base.Add(at).UnixMilli()}
	if score >= 0 {
		c.FraudScore, c.HasFraudScore = score, true
	}
	return event{click: &c}
}

func campaignOf(ad string) string { return fmt.Sprintf("cmp-%d", ad[len(ad)-1]%2) }

func deviceOf(id string) string { return []string{"web", "ios", "android"}[int(id[len(id)-1])%3] }

func vrd(ad, id string, v schemas.Verdict, decided time.Duration) event {
	return event{verdict: &schemas.FraudVerdict{ClickID: id, AdID: ad, Verdict: v, Reason: "test", DecidedAt: base.Add(decided).UnixMilli()}}
}

// oracle computes the streaming rule over the log: dedupe of click ids by event time within the
// window (held for window + grace behind the newest click), billable unless scored over the
// threshold or condemned by the id's latest verdict (a later decision wins, fraud wins a tie).
func oracle(log []event, window, grace time.Duration, threshold float64) map[minuteKey]delta {
	countedClicks, latest := oracleCounted(log, window, grace, threshold)
	out := map[minuteKey]delta{}
	for id, cs := range countedClicks {
		for _, c := range cs {
			k := minuteKey{group{c.ad, campaignOf(c.ad), deviceOf(id)}, schemas.FloorDiv(c.ts, 60_000) * 60}
			d := out[k]
			d.clicks++
			v, have := latest[id]
			d.billable += b2i(billable(c.over, v, have))
			out[k] = d
		}
	}
	return out
}

// oracleClick is a click the oracle counts.
type oracleClick struct {
	ad   string
	ts   int64
	over bool
}

// oracleCounted returns the clicks the dedupe rule counts, by click id, and each id's latest
// verdict.
func oracleCounted(log []event, window, grace time.Duration, threshold float64) (map[string][]oracleClick, map[string]verdictState) {
	type cc = oracleClick
	held := map[string][]int64{}
	var wm int64 = -1 << 62
	var countedClicks = map[string][]cc{}
	latest := map[string]verdictState{}
	for _, e := range log {
		if e.click != nil {
			c := e.click
			wm = max(wm, c.TS)
			cut := wm - (window + grace).Milliseconds()
			dup := false
			for _, t := range held[c.ClickID+"\x00"+c.AdID] {
				if t >= cut && abs(c.TS-t) < window.Milliseconds() {
					dup = true
				}
			}
			if dup || c.TS < cut {
				if !dup {
					countedClicks[c.ClickID] = append(countedClicks[c.ClickID], cc{c.AdID, c.TS, c.HasFraudScore && c.FraudScore > threshold})
				}
				continue
			}
			held[c.ClickID+"\x00"+c.AdID] = append(held[c.ClickID+"\x00"+c.AdID], c.TS)
			countedClicks[c.ClickID] = append(countedClicks[c.ClickID], cc{c.AdID, c.TS, c.HasFraudScore && c.FraudScore > threshold})
			continue
		}
		v := e.verdict
		s := verdictState{verdict: v.Verdict, decided: v.DecidedAt}
		cur, have := latest[v.ClickID]
		if newer(s, cur, have) {
			latest[v.ClickID] = s
		}
	}
	return countedClicks, latest
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// feeder plays a partition's log into aggregators: clicks and verdicts are two topics, read
// from their own offsets.
type feeder struct {
	clicks, verdicts [][]byte
}

func newFeeder(log []event) *feeder {
	f := &feeder{}
	for _, e := range log {
		if e.click != nil {
			f.clicks = append(f.clicks, schemas.AppendClick(nil, *e.click))
		} else {
			f.verdicts = append(f.verdicts, schemas.AppendFraudVerdict(nil, *e.verdict))
		}
	}
	return f
}

// play feeds records from the given positions up to (not including) toC and toV in chunks of
// one to five records, alternating topics by rng, flushing when flushEvery records went in.
func (f *feeder) play(t *testing.T, ctx context.Context, a *Aggregator, id int32, at offsets, toC, toV int, rng *rand.Rand, flushEvery int) {
	t.Helper()
	c, v, since := int(at.clicks), int(at.verdicts), 0
	for c < toC || v < toV {
		n := 1 + rng.IntN(5)
		if v >= toV || (c < toC && rng.IntN(2) == 0) {
			end := min(c+n, toC)
			a.Process(schemas.TopicClicks, id, records(schemas.TopicClicks, id, c, f.clicks[c:end]))
			since += end - c
			c = end
		} else {
			end := min(v+n, toV)
			a.Process(schemas.TopicFraudVerdicts, id, records(schemas.TopicFraudVerdicts, id, v, f.verdicts[v:end]))
			since += end - v
			v = end
		}
		if since >= flushEvery {
			if _, err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			since = 0
		}
	}
}

// records are values as the consumer hands them over: the records of topic's partition id at
// offsets from on.
func records(topic string, id int32, from int, values [][]byte) []*kgo.Record {
	out := make([]*kgo.Record, len(values))
	for i, v := range values {
		out[i] = &kgo.Record{Topic: topic, Partition: id, Offset: int64(from + i), Value: v}
	}
	return out
}

func minutes(t *testing.T, ctx context.Context, conn driver.Conn) map[minuteKey]delta {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT ad_id, campaign_id, device, toInt64(toUnixTimestamp(minute)), sum(clicks), sum(billable) FROM click_deltas
		WHERE ad_id != '' GROUP BY ad_id, campaign_id, device, minute`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[minuteKey]delta{}
	for rows.Next() {
		var k minuteKey
		var d delta
		if err := rows.Scan(&k.ad, &k.campaign, &k.device, &k.minute, &d.clicks, &d.billable); err != nil {
			t.Fatal(err)
		}
		if d != (delta{}) {
			out[k] = d
		}
	}
	return out
}

// hours returns the rolled-up hours per group (click_group_hours), after checking that each
// ad's hours (clicks_by_hour) are the sums of its groups'.
func hours(t *testing.T, ctx context.Context, conn driver.Conn) map[hourKey]delta {
	t.Helper()
	read := func(q string) map[hourKey]delta {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[hourKey]delta{}
		for rows.Next() {
			var k hourKey
			var d delta
			if err := rows.Scan(&k.ad, &k.campaign, &k.device, &k.hour, &d.clicks, &d.billable); err != nil {
				t.Fatal(err)
			}
			if d != (delta{}) {
				out[k] = d
			}
		}
		return out
	}
	groups := read(`SELECT ad_id, campaign_id, device, toInt64(toUnixTimestamp(hour)), clicks, billable FROM click_group_hours FINAL`)
	ads := read(`SELECT ad_id, '', '', toInt64(toUnixTimestamp(hour)), clicks, billable FROM clicks_by_hour FINAL`)
	if d := diff(ads, adHours(groups)); d != "[]" {
		t.Errorf("hours per ad are not the sums of their groups: %s", d)
	}
	return groups
}

// adHours sums hours per ad (the group's campaign and device left empty).
func adHours(m map[hourKey]delta) map[hourKey]delta {
	out := map[hourKey]delta{}
	for k, d := range m {
		a := hourKey{group{ad: k.ad}, k.hour}
		s := out[a]
		out[a] = delta{s.clicks + d.clicks, s.billable + d.billable}
	}
	for k, d := range out {
		if d == (delta{}) {
			delete(out, k)
		}
	}
	return out
}

func hoursOf(m map[minuteKey]delta) map[hourKey]delta {
	out := map[hourKey]delta{}
	for k, d := range m {
		h := hourKey{k.group, k.minute - k.minute%3600}
		s := out[h]
		s.clicks += d.clicks
		s.billable += d.billable
		out[h] = s
	}
	for k, d := range out {
		if d == (delta{}) {
			delete(out, k)
		}
	}
	return out
}

func diff[K comparable](got, want map[K]delta) string {
	var out []string
	for k, w := range want {
		if g := got[k]; g != w {
			out = append(out, fmt.Sprintf("%v: got %+v; want %+v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%v: got %+v; want nothing", k, g))
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... %d more", len(out)-10))
	}
	return fmt.Sprint(out)
}

var testCfg = Config{Window: 10 * time.Minute, Grace: 10 * time.Minute, FraudThreshold: 0.8, FlushInterval: time.Second,
	RollupInterval: 0, MaxBatch: 1000, VerdictHold: 8 * 24 * time.Hour, Owner: "test"}

// The streaming rule on a hand-made log: duplicates inside and outside 10 minutes, scores over
// the threshold, late, repeated, reversed and stale verdicts.
func TestMinuteCountsFollowTheStreamingRule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := []event{
		clk("a1", "k1", 10*time.Second, -1),
		clk("a1", "k2", 30*time.Second, 0.9), // over the threshold: counted, not billable
		clk("a1", "k3", time.Minute, 0.5),
		clk("a1", "k4", 2*time.Minute, -1),
		clk("a1", "k1", 5*time.Minute, -1), // double tap 5 minutes later: dropped
		clk("a2", "k5", 3*time.Minute, -1),
		clk("a1", "k1", 20*time.Minute, -1), // 20 minutes later: counted again
		vrd("a1", "k3", schemas.VerdictFraud, time.Hour),
		vrd("a1", "k3", schemas.VerdictFraud, time.Hour), // repeated: no change
		vrd("a1", "k4", schemas.VerdictFraud, time.Hour),
		vrd("a1", "k4", schemas.VerdictValid, 2*time.Hour),    // reversed later: billable again
		vrd("a1", "k3", schemas.VerdictValid, 30*time.Minute), // decided before the fraud verdict: ignored
		vrd("a1", "k1", schemas.VerdictFraud, 3*time.Hour),    // both counted k1 clicks lose billable
		vrd("a2", "k9", schemas.VerdictFraud, time.Hour),      // no such click
	}
	at := func(ad, campaign, device string, minute time.Duration) minuteKey {
		return minuteKey{group{ad, campaign, device}, base.Add(minute).Unix()}
	}
	want := map[minuteKey]delta{
		at("a1", "cmp-1", "ios", 0):                 {clicks: 1, billable: 0}, // k1 fraud
		at("a1", "cmp-1", "android", 0):             {clicks: 1, billable: 0}, // k2 over
		at("a1", "cmp-1", "web", time.Minute):       {clicks: 1, billable: 0}, // k3 fraud
		at("a1", "cmp-1", "ios", 2*time.Minute):     {clicks: 1, billable: 1}, // k4 valid at last
		at("a2", "cmp-0", "android", 3*time.Minute): {clicks: 1, billable: 1},
		at("a1", "cmp-1", "ios", 20*time.Minute):    {clicks: 1, billable: 0}, // k1 fraud
	}
	if got := oracle(log, testCfg.Window, testCfg.Grace, testCfg.FraudThreshold); diff(got, want) != "[]" {
		t.Fatalf("oracle disagrees with the hand count: %s", diff(got, want))
	}
	tests := []struct {
		name       string
		flushEvery int
	}{
		{"one batch", 1000},
		{"a flush every record", 1},
		{"a flush every three records", 3},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := openMigrated(t, ctx, fmt.Sprintf("clicks_rule_%d", i))
			a := New(testCfg, conn, func() time.Time { return base.Add(time.Hour) }, infra.Logger, prometheus.NewRegistry())
			at, err := a.Assign(ctx, []int32{0})
			if err != nil {
				t.Fatal(err)
			}
			f := newFeeder(log)
			// Clicks first, then verdicts: the verdicts come late, after the click batches.
			f.play(t, ctx, a, 0, resumeAt(at, 0), len(f.clicks), 0, rand.New(rand.NewPCG(1, uint64(i))), tt.flushEvery)
			f.play(t, ctx, a, 0, offsets{int64(len(f.clicks)), 0}, len(f.clicks), len(f.verdicts), rand.New(rand.NewPCG(2, uint64(i))), tt.flushEvery)
			if _, err := a.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			if d := diff(minutes(t, ctx, conn), want); d != "[]" {
				t.Errorf("minutes: %s", d)
			}
			if d := diff(hours(t, ctx, conn), hoursOf(want)); d != "[]" {
				t.Errorf("hours: %s", d)
			}
		})
	}
}

// Random logs played with random batch boundaries, interleavings of the two topics and
// crashes (the aggregator's memory lost, a new one resuming from ClickHouse and replaying)
// end with the oracle's minute and hour counts.
func TestCrashesAndReplaysMatchTheOracle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			var log []event
			ids := []string{}
			for i := range 400 {
				at := time.Duration(i)*5*time.Second + time.Duration(rng.IntN(60))*time.Second
				switch r := rng.IntN(10); {
				case r < 6 || len(ids) == 0:
					id := fmt.Sprintf("k%d", i)
					if len(ids) > 0 && rng.IntN(4) == 0 {
						id = ids[rng.IntN(len(ids))] // a repeat, inside or outside the window
					}
					ids = append(ids, id)
					score := -1.0
					if rng.IntN(3) == 0 {
						score = rng.Float64()
					}
					log = append(log, clk(fmt.Sprintf("ad%d", rng.IntN(3)), id, at, score))
				default:
					id := ids[rng.IntN(len(ids))]
					ad := ""
					for _, e := range log {
						if e.click != nil && e.click.ClickID == id {
							ad = e.click.AdID
						}
					}
					v := schemas.VerdictFraud
					if rng.IntN(3) == 0 {
						v = schemas.VerdictValid
					}
					log = append(log, vrd(ad, id, v, at+time.Duration(rng.IntN(3))*time.Hour))
				}
			}
			want := oracle(log, testCfg.Window, testCfg.Grace, testCfg.FraudThreshold)
			conn := openMigrated(t, ctx, fmt.Sprintf("clicks_crash_%d", seed))
			f := newFeeder(log)
			for round := 0; ; round++ {
				cfg := testCfg
				if round%2 == 1 {
					// Hours stay unrolled until the crash: the next owner must recompute them.
					cfg.RollupInterval = 24 * time.Hour
				}
				a := New(cfg, conn, func() time.Time { return base.Add(time.Hour) }, infra.Logger, prometheus.NewRegistry())
				res, err := a.Assign(ctx, []int32{0})
				if err != nil {
					t.Fatal(err)
				}
				at := resumeAt(res, 0)
				if round == 4 {
					f.play(t, ctx, a, 0, at, len(f.clicks), len(f.verdicts), rng, 1+rng.IntN(40))
					if _, err := a.FlushAll(ctx); err != nil {
						t.Fatal(err)
					}
					break
				}
				// Play part of the rest, flushing now and then, and crash (drop a) without a last flush.
				toC := int(at.clicks) + rng.IntN(len(f.clicks)-int(at.clicks)+1)
				toV := int(at.verdicts) + rng.IntN(len(f.verdicts)-int(at.verdicts)+1)
				f.play(t, ctx, a, 0, at, toC, toV, rng, 1+rng.IntN(40))
				if round%2 == 0 {
					// Crash between the batch's facts and its deltas: the replay must not take
					// its clicks for their own duplicates.
					if err := a.store.writeFacts(ctx, []*partition{held(a, 0)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if d := diff(minutes(t, ctx, conn), want); d != "[]" {
				t.Errorf("minutes: %s", d)
			}
			if d := diff(hours(t, ctx, conn), hoursOf(want)); d != "[]" {
				t.Errorf("hours: %s", d)
			}
		})
	}
}

// A batch an aggregator writes after a newer owner claimed its partition (a zombie whose fence
// check passed just before the claim) is undone by the owner at its next rollup: the minutes and
// hours count its clicks once, as the owner's replay of them.
func TestZombieBatchIsUndone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "clicks_zombie")
	var log []event
	for i := range 8 {
		log = append(log, clk("a1", fmt.Sprintf("z%d", i), time.Duration(i)*time.Second, -1))
	}
	f := newFeeder(log)
	now := func() time.Time { return base.Add(time.Hour) }
	old := New(testCfg, conn, now, infra.Logger, prometheus.NewRegistry())
	if _, err := old.Assign(ctx, []int32{0}); err != nil {
		t.Fatal(err)
	}
	old.Process(schemas.TopicClicks, 0, records(schemas.TopicClicks, 0, 0, f.clicks[0:5]))
	if _, err := old.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	owner := New(testCfg, conn, now, infra.Logger, prometheus.NewRegistry())
	// The owner also holds partition 1, which has no zombie: one statement looks in both.
	at, err := owner.Assign(ctx, []int32{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	// The zombie goes on with records 5..7 and its INSERT lands after the claim.
	old.Process(schemas.TopicClicks, 0, records(schemas.TopicClicks, 0, 5, f.clicks[5:8]))
	if err := old.store.writeDeltas(ctx, []*partition{held(old, 0)}, now()); err != nil {
		t.Fatal(err)
	}
	f.play(t, ctx, owner, 0, resumeAt(at, 0), len(f.clicks), 0, rand.New(rand.NewPCG(3, 3)), 100)
	if _, err := owner.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := oracle(log, testCfg.Window, testCfg.Grace, testCfg.FraudThreshold)
	if d := diff(minutes(t, ctx, conn), want); d != "[]" {
		t.Errorf("minutes: %s", d)
	}
	if d := diff(hours(t, ctx, conn), hoursOf(want)); d != "[]" {
		t.Errorf("hours: %s", d)
	}
}

// A partition's first claim resumes where Kafka's committed offsets say; a later claim that
// finds no checkpoint resumes at its start in both topics, 0: the first owner's batch, landing
// after the claim's read, is undone, and the first owner's commit to Kafka may be past it.
func TestClaimWithoutCheckpointResumesAtItsStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "clicks_no_checkpoint")
	now := func() time.Time { return base.Add(time.Hour) }
	r, err := New(testCfg, conn, now, infra.Logger, prometheus.NewRegistry()).Assign(ctx, []int32{2})
	if err != nil || len(r.At) != 0 {
		t.Fatalf("first claim: got resume %v, %v; want none (kafka's committed offsets)", r.At, err)
	}
	r, err = New(testCfg, conn, now, infra.Logger, prometheus.NewRegistry()).Assign(ctx, []int32{2})
	for _, topic := range []string{schemas.TopicClicks, schemas.TopicFraudVerdicts} {
		if at, ok := r.At[topic][2]; err != nil || !ok || at != 0 {
			t.Errorf("second claim without a checkpoint: got %s resuming at %d (%v), %v; want 0", topic, at, ok, err)
		}
	}
}

// resumeAt is where partition id resumes in both topics, as Assign said.
func resumeAt(r member.Resume, id int32) offsets {
	return offsets{clicks: r.At[schemas.TopicClicks][id], verdicts: r.At[schemas.TopicFraudVerdicts][id]}
}

// held is a's partition id, nil when a does not hold it.
func held(a *Aggregator, id int32) *partition {
	for _, p := range a.Held(map[int32]bool{id: true}) {
		return p
	}
	return nil
}
