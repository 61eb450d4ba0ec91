package views

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axiomhq/hyperloglog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/viewersketch"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// Records written straight to Kafka, bypassing the collector's checks, are set aside in
// dead_letters (named by partition and offset) and counted nowhere, while the good records
// around them are counted.
func TestPoisonRecordsSetAside(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_poison_test")
	now := time.Now()
	item := "poison-item"
	good := func(viewer string) []byte {
		return schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: viewer, TS: now.UnixMilli()})
	}
	year2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	records := []struct {
		value      []byte
		wantReason string // "" for a good record
	}{
		{good("a"), ""},
		{schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: "b", TS: year2200}), "ts: is"},
		{schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: "c", TS: -5000}), "ts: is"},
		{[]byte("junk"), "not a tally record"},
		{schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: "", TS: now.UnixMilli()}), "viewer_id: is required"},
		{good("d"), ""},
	}
	prod := infra.Producer(t, schemas.TopicViews, 2)
	var partition int32
	wantDead := map[int64]string{}
	for _, r := range records {
		rec, err := prod.ProduceSync(ctx, &kgo.Record{Topic: schemas.TopicViews, Key: []byte(item), Value: r.value}).First()
		if err != nil {
			t.Fatal(err)
		}
		partition = rec.Partition
		if r.wantReason != "" {
			wantDead[rec.Offset] = r.wantReason
		}
	}
	agg := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: 200 * time.Millisecond, SketchInterval: time.Second,
		MaxBatch: 100000, SketchIdle: time.Minute}, conn, time.Now, infra.Logger, prometheus.NewRegistry())
	src, err := NewSource(testMember("views-poison-test", conn, infra.Logger), agg)
	if err != nil {
		t.Fatal(err)
	}
	src.Start()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := src.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	query := func(q string, args ...any) uint64 { t.Helper(); return queryUint(t, ctx, conn, q, args...) }
	// The good record after the bad ones is counted: counting went on.
	// The rollups are written after the deltas, in their own INSERTs.
	testinfra.WaitFor(t, 20*time.Second, "both good views counted", func() (bool, string) {
		n := query("SELECT toUInt64(sum(views)) FROM view_deltas WHERE item_id = ?", item)
		r := query("SELECT toUInt64(sum(views)) FROM views_total WHERE item_id = ?", item)
		return n >= 2 && r >= 2, fmt.Sprintf("%d counted, %d in the all-time total", n, r)
	})
	tests := []struct {
		name  string
		query string
		want  uint64
	}{
		{"seconds", "SELECT toUInt64(sum(views)) FROM view_deltas WHERE item_id = ?", 2},
		{"seconds outside this year", "SELECT count() FROM view_deltas WHERE item_id = ? AND toYear(second) != toYear(now())", 0},
		{"all-time total", "SELECT toUInt64(sum(views)) FROM views_total WHERE item_id = ?", 2},
		{"days", "SELECT toUInt64(sum(views)) FROM views_by_day WHERE item_id = ?", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := query(tt.query, item); got != tt.want {
				t.Errorf("got %d; want %d", got, tt.want)
			}
		})
	}
	rows, err := conn.Query(ctx, "SELECT partition, offset, reason FROM dead_letters FINAL WHERE source = 'views' AND partition = ?", partition)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	for rows.Next() {
		var p int32
		var off int64
		var reason string
		if err := rows.Scan(&p, &off, &reason); err != nil {
			t.Fatal(err)
		}
		got[off] = reason
	}
	rows.Close()
	for off, want := range wantDead {
		if !strings.Contains(got[off], want) {
			t.Errorf("dead letter of partition %d offset %d: got reason %q; want one containing %q", partition, off, got[off], want)
		}
	}
	if len(got) != len(wantDead) {
		t.Errorf("got dead letters at offsets %v; want %d of them", got, len(wantDead))
	}
}

// A replay of a batch whose dead letters were written before a crash (the deltas were not)
// sets aside the same records and leaves one dead letter each.
func TestPoisonReplaySetsAsideTheSame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_poison_replay_test")
	now := time.Now()
	cfg := Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
		MaxBatch: 1000, SketchIdle: time.Minute}
	offsets := []int64{0, 1, 2, 3}
	values := [][]byte{view("replay", "a", now.UnixMilli()), []byte("junk"), view("replay", "b", -1), view("replay", "c", now.UnixMilli())}
	crashed := New(cfg, conn, time.Now, infra.Logger, prometheus.NewRegistry())
	if _, err := assignViews(crashed, ctx, []int32{4}); err != nil {
		t.Fatal(err)
	}
	processAt(crashed, 4, offsets, values)
	if err := crashed.store.dead.Write(ctx, conn, heldPart(crashed, 4).dead); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	second := New(cfg, conn, time.Now, infra.Logger, reg)
	if _, err := assignViews(second, ctx, []int32{4}); err != nil {
		t.Fatal(err)
	}
	processAt(second, 4, offsets, values)
	if _, err := flushAllViews(second, ctx); err != nil {
		t.Fatal(err)
	}
	var counted, dead uint64
	if err := conn.QueryRow(ctx, "SELECT toUInt64(sum(views)) FROM view_deltas WHERE item_id = 'replay'").Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM dead_letters FINAL WHERE source = 'views' AND partition = 4").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if counted != 2 || dead != 2 {
		t.Errorf("got %d counted, %d dead letters; want 2, 2", counted, dead)
	}
	if got := metricValue(t, reg, "tally_dead_letters_total"); got != 2 {
		t.Errorf("got tally_dead_letters_total %v; want 2", got)
	}
}

// A stored sketch that does not read back is set aside and replaced by a fresh one at its fold:
// the sketch write goes on, views are counted, and the new sketch holds the new viewers.
func TestGarbageStoredSketchSetAsideAndReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openMigrated(t, ctx, "views_bad_sketch_test")
	now := time.Now().UTC()
	sixteen, _ := hyperloglog.New16().MarshalBinary()
	garbage := map[string]string{"bad-garbage": "not a sketch at all", "bad-precision": string(sixteen)}
	for item, blob := range garbage {
		for _, day := range []time.Time{time.Unix(0, 0), now.Truncate(24 * time.Hour)} {
			if err := conn.Exec(ctx, "INSERT INTO unique_viewers (item_id, day, sketch, viewers, updated_at) VALUES (?, ?, ?, 7, ?)",
				item, day, blob, now.Add(-time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	reg := prometheus.NewRegistry()
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, SketchInterval: time.Second,
		FoldInterval: time.Second, MaxBatch: 1000, SketchIdle: time.Minute}, conn, time.Now, infra.Logger, reg)
	if _, err := assignViews(a, ctx, []int32{6}); err != nil {
		t.Fatal(err)
	}
	var offsets []int64
	var values [][]byte
	for _, item := range []string{"bad-garbage", "bad-precision", "good-sketch"} {
		for i := range 3 {
			offsets = append(offsets, int64(len(offsets)))
			values = append(values, view(item, fmt.Sprintf("viewer-%d", i), now.UnixMilli()))
		}
	}
	processAt(a, 6, offsets, values)
	// ClickHouse errors are retried until ctx ends: a sketch write that cannot succeed fails here.
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	if _, err := flushAllViews(a, wctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for _, item := range []string{"bad-garbage", "bad-precision", "good-sketch"} {
		t.Run(item, func(t *testing.T) {
			var counted, viewers uint64
			if err := conn.QueryRow(ctx, "SELECT toUInt64(sum(views)) FROM view_deltas WHERE item_id = ?", item).Scan(&counted); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(ctx, "SELECT argMax(viewers, updated_at) FROM unique_viewers WHERE item_id = ? AND day = toDate(0)", item).Scan(&viewers); err != nil {
				t.Fatal(err)
			}
			if counted != 3 || viewers != 3 {
				t.Errorf("got %d counted, %d unique viewers; want 3, 3", counted, viewers)
			}
			var dead uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM dead_letters FINAL WHERE source = 'unique_viewers' AND startsWith(ref, ?)",
				"item_id="+item+" ").Scan(&dead); err != nil {
				t.Fatal(err)
			}
			want := uint64(2) // the day's and the all-time sketch
			if _, bad := garbage[item]; !bad {
				want = 0
			}
			if dead != want {
				t.Errorf("got %d dead letters; want %d", dead, want)
			}
		})
	}
	if got := metricValue(t, reg, "tally_dead_letters_total"); got != 4 {
		t.Errorf("got tally_dead_letters_total %v; want 4", got)
	}
}

// metricValue sums the samples of the counter named name in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
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
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func FuzzDecodeStoredSketch(f *testing.F) {
	sparse := hyperloglog.New14()
	dense := hyperloglog.New14()
	for i := range 20000 {
		if i < 10 {
			sparse.Insert(fmt.Appendf(nil, "v%d", i))
		}
		dense.Insert(fmt.Appendf(nil, "v%d", i))
	}
	for _, sk := range []*hyperloglog.Sketch{hyperloglog.New14(), sparse, dense, hyperloglog.New16(), hyperloglog.NewNoSparse()} {
		b, err := sk.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte("not a sketch"))
	f.Fuzz(func(t *testing.T, blob []byte) {
		sk, err := viewersketch.Decode(blob)
		if err != nil {
			return
		}
		// What decodes must be usable the way the aggregator uses it: merged into a fresh
		// precision-14 sketch, estimated, written and read back.
		into := hyperloglog.New14()
		if err := into.Merge(sk); err != nil {
			t.Fatalf("merge of a decoded sketch: %v", err)
		}
		out, err := into.MarshalBinary()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		back, err := viewersketch.Decode(out)
		if err != nil {
			t.Fatalf("decode of a re-encoded sketch: %v", err)
		}
		if got, want := back.Estimate(), into.Estimate(); got != want {
			t.Fatalf("got estimate %d after a round trip; want %d", got, want)
		}
	})
}
