package clicks

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// letterKey names a row of dead_letters.
type letterKey struct {
	source    string
	partition int32
	offset    int64
}

// letter is what a row of dead_letters should say, or says.
type letter struct {
	ref, reason, payload string
	seenAt               time.Time
}

// Click and verdict records written straight to Kafka, bypassing the collector's checks (garbage
// bytes, another kind, valid wire with invalid fields), are set aside: each becomes exactly one
// dead_letters row naming its topic, partition and offset, with its key, the decoder's reason
// and its bytes, is logged and counted, and the good records around it are counted exactly. A
// crash after a batch's dead letters (and facts) were written but before its checkpoint is
// replayed by a consumer on the broker from the older checkpoint: the replay writes no second
// row (nor a differing one: the rows keep the first write's seen_at) and counts nothing twice.
func TestRefusedRecordsSetAsideOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "clicks_dead_letters")
	// The topics outlive a run of this test (go test -count): its ad is its own.
	tag := fmt.Sprint(time.Now().UnixNano())
	ad := "poison-ad-" + tag
	good := func(id string, at time.Duration) []byte {
		return schemas.AppendClick(nil, *clk(ad, id, at, -1).click)
	}
	badClick := func(edit func(*schemas.Click)) []byte {
		c := *clk(ad, "bad", time.Minute, -1).click
		edit(&c)
		return schemas.AppendClick(nil, c)
	}
	verdict := func(id string, v schemas.Verdict) schemas.FraudVerdict {
		return *vrd(ad, id, v, time.Hour).verdict
	}
	badVerdict := func(edit func(*schemas.FraudVerdict)) []byte {
		v := verdict("k1", schemas.VerdictFraud)
		edit(&v)
		return schemas.AppendFraudVerdict(nil, v)
	}
	fullVerdict := schemas.AppendFraudVerdict(nil, verdict("k4", schemas.VerdictFraud))
	produced := []struct {
		topic      string
		key        []byte
		value      []byte
		wantReason string // "" for a good record
	}{
		{schemas.TopicClicks, []byte(ad), good("k1", 0), ""},
		{schemas.TopicClicks, []byte(ad), good("k2", time.Minute), ""},
		{schemas.TopicClicks, []byte(ad), []byte("junk"), "not a tally record"},
		{schemas.TopicClicks, []byte(ad), nil, "truncated record"},
		{schemas.TopicClicks, []byte(ad), badClick(func(c *schemas.Click) { c.ClickID = "" }), "click_id: is required"},
		{schemas.TopicClicks, []byte(ad), good("k1", 30*time.Second), ""}, // a double tap: a duplicate, not refused
		{schemas.TopicClicks, []byte(ad), badClick(func(c *schemas.Click) { c.TS = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() }), "ts: is"},
		{schemas.TopicClicks, []byte(ad), badClick(func(c *schemas.Click) { c.FraudScore, c.HasFraudScore = 1.5, true }), "fraud_score"},
		{schemas.TopicClicks, []byte(ad), schemas.AppendView(nil, schemas.View{ItemID: "i", ViewerID: "v", TS: base.UnixMilli()}), "record is a view"},
		{schemas.TopicClicks, []byte(ad), good("k3", 2*time.Minute), ""},
		{schemas.TopicClicks, nil, []byte{1, byte(schemas.KindClick), 0xff}, "truncated record"}, // no key: any partition
		{schemas.TopicClicks, []byte(ad), good("k4", 3*time.Minute), ""},
		{schemas.TopicFraudVerdicts, []byte(ad), schemas.AppendFraudVerdict(nil, verdict("k2", schemas.VerdictFraud)), ""},
		{schemas.TopicFraudVerdicts, []byte(ad), []byte("\x00\x00garbage"), "registry framing"},
		{schemas.TopicFraudVerdicts, []byte(ad), badVerdict(func(v *schemas.FraudVerdict) { v.Verdict = 7 }), "verdict: is verdict(7)"},
		{schemas.TopicFraudVerdicts, []byte(ad), badVerdict(func(v *schemas.FraudVerdict) { v.DecidedAt = 0 }), "decided_at"},
		{schemas.TopicFraudVerdicts, []byte(ad), badVerdict(func(v *schemas.FraudVerdict) { v.Reason = "bot\x07" }), "reason"},
		{schemas.TopicFraudVerdicts, []byte(ad), fullVerdict[:len(fullVerdict)-3], "truncated record"},
		{schemas.TopicFraudVerdicts, []byte(ad), schemas.AppendFraudVerdict(nil, verdict("k3", schemas.VerdictValid)), ""},
	}
	// k1, k2, k3, k4 counted (k1's double tap is not); k2 condemned by its verdict.
	const wantClicks, wantBillable = 4, 3

	// Co-partitioned, as the collector creates them.
	prod := infra.Producer(t, schemas.TopicClicks, 2)
	infra.Producer(t, schemas.TopicFraudVerdicts, 2)
	wantReason := map[letterKey]string{}
	for _, p := range produced {
		r, err := prod.ProduceSync(ctx, &kgo.Record{Topic: p.topic, Key: p.key, Value: p.value}).First()
		if err != nil {
			t.Fatal(err)
		}
		if p.wantReason != "" {
			wantReason[letterKey{r.Topic, r.Partition, r.Offset}] = p.wantReason
		}
	}

	// The oracle: every record of both topics the decoder refuses (an earlier run's too) is a
	// dead letter with its key, the decoder's error and its bytes.
	log := readLog(t, ctx)
	want := map[letterKey]letter{}
	for _, recs := range log {
		for _, r := range recs {
			var err error
			if r.Topic == schemas.TopicClicks {
				_, err = schemas.DecodeClick(r.Value)
			} else {
				_, err = schemas.DecodeFraudVerdict(r.Value)
			}
			if err != nil {
				want[letterKey{r.Topic, r.Partition, r.Offset}] = letter{ref: string(r.Key), reason: err.Error(), payload: string(r.Value)}
			}
		}
	}
	for k, reason := range wantReason {
		if !strings.Contains(want[k].reason, reason) {
			t.Fatalf("the decoder refuses %v with %q; want a reason containing %q (the test's bad records are not what it means)", k, want[k].reason, reason)
		}
	}

	// The first owner counts the first half of every partition and flushes, processes the rest
	// and dies after writing that batch's dead letters and facts, before its deltas and checkpoint.
	firstSeen := base
	logs := &captured{}
	a := New(testCfg, conn, func() time.Time { return firstSeen }, slog.New(logs), prometheus.NewRegistry())
	var ids []int32
	for tp := range log {
		if !slices.Contains(ids, tp.partition) {
			ids = append(ids, tp.partition)
		}
	}
	if _, err := a.Assign(ctx, ids); err != nil {
		t.Fatal(err)
	}
	replayed := map[letterKey]bool{} // the dead letters of the batch the crash cut short
	for tp, recs := range log {
		a.Process(tp.topic, tp.partition, recs[:len(recs)/2])
	}
	if _, err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for tp, recs := range log {
		a.Process(tp.topic, tp.partition, recs[len(recs)/2:])
		for _, r := range recs[len(recs)/2:] {
			k := letterKey{r.Topic, r.Partition, r.Offset}
			if _, refused := want[k]; refused {
				replayed[k] = true
			}
		}
	}
	var pending []*partition
	for _, id := range ids {
		p := held(a, id)
		if err := a.dead.Write(ctx, conn, p.dead); err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	if err := a.store.writeFacts(ctx, pending); err != nil {
		t.Fatal(err)
	}

	// The next owner, a consumer on the broker, resumes from the older checkpoint, on another
	// day than the first owner's clock.
	reg := prometheus.NewRegistry()
	b := New(testCfg, conn, time.Now, slog.New(logs), reg)
	src, err := NewSource(member.Config{Group: member.Group{Brokers: []string{infra.Kafka.Addr()}, Name: "clicks-poison-" + tag, SessionTimeout: 6 * time.Second},
		Poll: 200 * time.Millisecond, Halts: halt.Store{Conn: conn}, Owner: "test", Now: time.Now, Logger: slog.New(logs), Registry: prometheus.NewRegistry()}, b)
	if err != nil {
		t.Fatal(err)
	}
	src.Start()
	ends := map[int32]offsets{}
	for tp, recs := range log {
		o := ends[tp.partition]
		if tp.topic == schemas.TopicClicks {
			o.clicks = recs[len(recs)-1].Offset + 1
		} else {
			o.verdicts = recs[len(recs)-1].Offset + 1
		}
		ends[tp.partition] = o
	}
	testinfra.WaitFor(t, 30*time.Second, "the replay checkpointed to the end of the log", func() (bool, string) {
		var behind []string
		for id, end := range ends {
			cp, err := b.store.loadCheckpoint(ctx, id, "0")
			if err != nil {
				return false, err.Error()
			}
			if end.clicks > cp.at.clicks || end.verdicts > cp.at.verdicts {
				behind = append(behind, fmt.Sprintf("partition %d at %+v of %+v", id, cp.at, end))
			}
		}
		return len(behind) == 0, strings.Join(behind, ", ")
	})
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := src.Stop(sctx); err != nil {
		t.Fatalf("stop: %v", err)
	}

	t.Run("good records counted once", func(t *testing.T) {
		tests := []struct {
			name, query string
		}{
			{"minutes", "SELECT toInt64(sum(clicks)), toInt64(sum(billable)) FROM click_deltas WHERE ad_id = ?"},
			{"hours", "SELECT toInt64(sum(clicks)), toInt64(sum(billable)) FROM clicks_by_hour FINAL WHERE ad_id = ?"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var clicks, billable int64
				if err := conn.QueryRow(ctx, tt.query, ad).Scan(&clicks, &billable); err != nil {
					t.Fatal(err)
				}
				if clicks != wantClicks || billable != wantBillable {
					t.Errorf("got %d clicks, %d billable; want %d, %d", clicks, billable, wantClicks, wantBillable)
				}
			})
		}
	})

	t.Run("one dead letter per refused record", func(t *testing.T) {
		rows, err := conn.Query(ctx, `SELECT source, partition, offset, ref, reason, payload, seen_at FROM dead_letters FINAL
			WHERE source IN (?, ?)`, schemas.TopicClicks, schemas.TopicFraudVerdicts)
		if err != nil {
			t.Fatal(err)
		}
		got := map[letterKey]letter{}
		for rows.Next() {
			var k letterKey
			var l letter
			if err := rows.Scan(&k.source, &k.partition, &k.offset, &l.ref, &l.reason, &l.payload, &l.seenAt); err != nil {
				t.Fatal(err)
			}
			got[k] = l
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for k, w := range want {
			t.Run(fmt.Sprintf("%s partition %d offset %d", k.source, k.partition, k.offset), func(t *testing.T) {
				g, ok := got[k]
				switch {
				case !ok:
					t.Fatalf("got no dead letter; want one with reason %q", w.reason)
				case g.ref != w.ref || g.reason != w.reason || g.payload != w.payload:
					t.Errorf("got ref %q, reason %q, payload %q; want %q, %q, %q", g.ref, g.reason, g.payload, w.ref, w.reason, w.payload)
				case !g.seenAt.Equal(firstSeen):
					t.Errorf("got seen_at %v; want %v, the first write's (a replay keeps it)", g.seenAt, firstSeen)
				}
			})
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("got a dead letter at %v; want none (the record is good)", k)
			}
		}
	})

	t.Run("a replay writes identical rows", func(t *testing.T) {
		// Until the engine merges them, a replayed letter has two rows: a reader without FINAL
		// sees the same thing twice, never two different things.
		var keys, differing uint64
		if err := conn.QueryRow(ctx, `SELECT count(), countIf(versions > 1) FROM (
			SELECT uniqExact(ref, reason, payload, seen_at) AS versions FROM dead_letters WHERE source IN (?, ?) GROUP BY source, partition, offset)`,
			schemas.TopicClicks, schemas.TopicFraudVerdicts).Scan(&keys, &differing); err != nil {
			t.Fatal(err)
		}
		if keys != uint64(len(want)) || differing != 0 {
			t.Errorf("got %d records with rows, %d of them with differing rows; want %d, 0", keys, differing, len(want))
		}
	})

	t.Run("the replay reports what it wrote", func(t *testing.T) {
		bySource := map[string]float64{}
		for k := range replayed {
			bySource[k.source]++
		}
		for _, source := range []string{schemas.TopicClicks, schemas.TopicFraudVerdicts} {
			if got := counterValue(t, reg, "tally_dead_letters_total", source); got != bySource[source] {
				t.Errorf("tally_dead_letters_total{source=%q}: got %v; want %v", source, got, bySource[source])
			}
		}
		if got := counterValue(t, reg, "tally_clicks_undecodable_total", ""); got != float64(len(replayed)) {
			t.Errorf("tally_clicks_undecodable_total: got %v; want %d", got, len(replayed))
		}
	})

	t.Run("every dead letter logged", func(t *testing.T) {
		logged := map[letterKey]int{}
		for _, r := range logs.all() {
			if r.Message != "set aside in dead_letters" {
				continue
			}
			var k letterKey
			var reason string
			r.Attrs(func(a slog.Attr) bool {
				switch a.Key {
				case "source":
					k.source = a.Value.String()
				case "partition":
					k.partition = int32(a.Value.Int64())
				case "offset":
					k.offset = a.Value.Int64()
				case "reason":
					reason = a.Value.String()
				}
				return true
			})
			if w, ok := want[k]; !ok || reason != w.reason {
				t.Errorf("logged %v with reason %q; want no such line", k, reason)
			}
			logged[k]++
		}
		for k := range want {
			// Once when first written, again when the replay wrote it again.
			n := 1
			if replayed[k] {
				n = 2
			}
			if logged[k] != n {
				t.Errorf("%v: logged %d times; want %d", k, logged[k], n)
			}
		}
	})
}

// topicPartition names one partition of one topic.
type topicPartition struct {
	topic     string
	partition int32
}

// readLog reads both click topics whole, in offset order per partition.
func readLog(t *testing.T, ctx context.Context) map[topicPartition][]*kgo.Record {
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
	left := map[topicPartition]int64{}
	from := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[topicPartition{o.Topic, o.Partition}] = o.Offset
			if from[o.Topic] == nil {
				from[o.Topic] = map[int32]kgo.Offset{}
			}
			from[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	out := map[topicPartition][]*kgo.Record{}
	cl.AddConsumePartitions(from)
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPartition{r.Topic, r.Partition}
			end, ok := left[tp]
			if !ok || r.Offset >= end {
				return
			}
			out[tp] = append(out[tp], r)
			if r.Offset+1 >= end {
				delete(left, tp)
			}
		})
	}
	return out
}

// counterValue sums the samples of the counter named name in reg whose source label is source
// (every sample when source is "").
func counterValue(t *testing.T, reg *prometheus.Registry, name, source string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := source == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					match = true
				}
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// captured is a slog handler that keeps the warnings and errors logged through it.
type captured struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *captured) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}

func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

func (c *captured) all() []slog.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recs)
}
