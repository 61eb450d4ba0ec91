package views

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/axiomhq/hyperloglog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/viewersketch"
)

func view(item, viewer string, ts int64) []byte {
	return schemas.AppendView(nil, schemas.View{ItemID: item, ViewerID: viewer, TS: ts})
}

func TestPartitionBucketsBySecondOfEventTime(t *testing.T) {
	t0 := int64(1_800_000_000_000) // a whole second
	now := time.UnixMilli(t0)
	tests := []struct {
		name    string
		records [][]byte
		want    map[deltaKey]uint64
		poison  int
	}{
		{"same second", [][]byte{view("i", "a", t0), view("i", "b", t0+999)}, map[deltaKey]uint64{{"i", t0 / 1000}: 2}, 0},
		{"next second", [][]byte{view("i", "a", t0+999), view("i", "b", t0+1000)}, map[deltaKey]uint64{{"i", t0 / 1000}: 1, {"i", t0/1000 + 1}: 1}, 0},
		{"duplicate not counted", [][]byte{view("i", "a", t0), view("i", "a", t0+5000)}, map[deltaKey]uint64{{"i", t0 / 1000}: 1}, 0},
		{"late view in its own second", [][]byte{view("i", "a", t0), view("i", "b", t0-3_600_000)}, map[deltaKey]uint64{{"i", t0 / 1000}: 1, {"i", t0/1000 - 3600}: 1}, 0},
		{"undecodable set aside", [][]byte{[]byte("junk"), view("i", "a", t0)}, map[deltaKey]uint64{{"i", t0 / 1000}: 1}, 1},
		{"times outside 2000-2100 set aside", [][]byte{view("i", "a", -1), view("i", "b", 7_258_118_400_000), view("i", "c", t0)},
			map[deltaKey]uint64{{"i", t0 / 1000}: 1}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartition(3, 30*time.Minute, 10*time.Minute, 100, 100)
			for i, r := range tt.records {
				p.process(100+int64(i), r, now)
			}
			if len(p.deltas) != len(tt.want) {
				t.Errorf("got deltas %v; want %v", p.deltas, tt.want)
			}
			for k, w := range tt.want {
				if g := p.deltas[k]; g != w {
					t.Errorf("delta %v: got %d; want %d", k, g, w)
				}
			}
			if p.poison != tt.poison || len(p.dead) != tt.poison {
				t.Errorf("got %d set aside, %d dead letters; want %d", p.poison, len(p.dead), tt.poison)
			}
			if want := 100 + int64(len(tt.records)); p.next != want || !p.pending() {
				t.Errorf("got next %d pending %v; want %d true", p.next, p.pending(), want)
			}
		})
	}
}

// foldAll marks every sketch of p folded, as foldSketches does once it wrote them.
func foldAll(p *partition) {
	for _, s := range p.sketches {
		s.unfolded = false
	}
}

func TestMarkFlushedResetsBatchAndEvictsIdleSketches(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 0, 0)
	p.process(0, view("old", "a", t0.UnixMilli()), t0)
	p.process(1, view("new", "b", t0.UnixMilli()), t0.Add(50*time.Second))
	if got := len(p.sketches); got != 4 { // day + all-time for each item
		t.Fatalf("got %d sketches; want 4", got)
	}
	p.markFlushed(p.next, t0.Add(90*time.Second))
	if p.pending() || len(p.deltas) != 0 || p.counted.len() != 0 || p.records != 0 {
		t.Errorf("got pending=%v deltas=%d counted=%d records=%d after flush; want an empty batch", p.pending(), len(p.deltas), p.counted.len(), p.records)
	}
	if !p.sketchesPending(t0, false) || len(p.sketches) != 4 {
		t.Fatalf("got sketchesPending=%v with %d sketches after a deltas flush; want true with 4 (sketches have their own interval)", p.sketchesPending(t0, false), len(p.sketches))
	}
	for _, s := range p.sketches {
		s.current(t0, false) // as the delta write does
	}
	markSketched(p, t0.Add(90*time.Second), time.Minute)
	if p.sketchesPending(t0, false) {
		t.Errorf("got sketchesPending after the deltas were written; want false")
	}
	if len(p.sketches) != 4 {
		t.Fatalf("got %d sketches after their deltas were written; want 4 (none folded yet)", len(p.sketches))
	}
	foldAll(p)
	markSketched(p, t0.Add(90*time.Second), time.Minute)
	for k, s := range p.sketches {
		if k.item != "new" {
			t.Errorf("got sketch %v kept after a minute idle; want it dropped", k)
		}
		if s.dirty() {
			t.Errorf("got sketch %v dirty after flush; want clean", k)
		}
	}
	if len(p.sketches) != 2 {
		t.Errorf("got %d sketches; want the 2 of the recently touched item", len(p.sketches))
	}
}

// A partition resumed below its deltas checkpoint (the sketches were written earlier) puts the
// replayed records into the sketches only: they are counted and in the dedupe state already.
func TestReplayBelowDeltasCheckpointOnlyFillsSketches(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ts := t0.UnixMilli()
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 12, 10)
	if p.next != 10 || p.pending() {
		t.Fatalf("got next %d pending %v; want 10 false (resume at the sketch checkpoint)", p.next, p.pending())
	}
	for i, viewer := range []string{"a", "b", "c", "d"} { // offsets 10..13; 10 and 11 are counted already
		p.process(10+int64(i), view("i", viewer, ts), t0)
	}
	if got := p.deltas[deltaKey{"i", ts / 1000}]; got != 2 {
		t.Errorf("got %d views counted; want 2 (offsets 12 and 13 only)", got)
	}
	if p.records != 2 || p.counted.len() != 2 || p.win.Len() != 2 {
		t.Errorf("got records=%d counted=%d dedupe pairs=%d; want 2 2 2", p.records, p.counted.len(), p.win.Len())
	}
	for _, k := range []sketchKey{{"i", int32(ts / 86_400_000)}, {"i", allTime}} {
		s := p.sketches[k]
		if s == nil || s.viewers.estimate() != 4 {
			t.Errorf("sketch %v: got %v; want 4 viewers (replayed ones included)", k, s)
		}
	}
	if !p.pending() || !p.sketchesPending(t0, false) {
		t.Errorf("got pending=%v sketchesPending=%v; want both", p.pending(), p.sketchesPending(t0, false))
	}
}

func TestApplyIgnoresOffsetsAlreadyApplied(t *testing.T) {
	a := New(Config{Window: 30 * time.Minute, Grace: 10 * time.Minute, FlushInterval: time.Second, MaxBatch: 100, SketchIdle: time.Minute},
		nil, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 10, 10)
	ts := time.Now().UnixMilli()
	var recs []*kgo.Record
	for i, v := range []string{"a", "b", "c", "d"} {
		recs = append(recs, &kgo.Record{Offset: int64(8 + i), Value: view("i", v, ts)})
	}
	if got := a.Apply(p, schemas.TopicViews, recs); got.Records != 2 || got.Counted != 2 {
		t.Errorf("got %+v applied; want 2 records, 2 counted", got)
	}
	if got := p.deltas[deltaKey{"i", ts / 1000}]; got != 2 {
		t.Errorf("got %d views counted; want 2 (offsets below the checkpoint ignored)", got)
	}
	if p.next != 12 {
		t.Errorf("got next offset %d; want 12", p.next)
	}
}

// Sketches are filled with viewerHash through InsertHash; they must come out byte for byte as
// axiomhq's Insert makes them, or the stored sketches and the new ones would count a viewer twice.
func TestViewerHashIsInsertHash(t *testing.T) {
	for _, n := range []int{1, 100, 5000} { // sparse, and past the switch to dense registers
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			byInsert, byHash := hyperloglog.New14(), hyperloglog.New14()
			for i := range n {
				viewer := "viewer-" + strconv.Itoa(i*7919)
				byInsert.Insert([]byte(viewer))
				byHash.InsertHash(viewerHash(viewer))
			}
			a, err := byInsert.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			b, err := byHash.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("got a sketch of %d bytes (estimate %d) by hash; want the %d bytes (estimate %d) Insert makes",
					len(b), byHash.Estimate(), len(a), byInsert.Estimate())
			}
		})
	}
}

// A day sketch keeps a pointer to its item's all-time sketch. If the all-time sketch is evicted
// while the day sketch stays (possible when the clock steps back between records), the next view
// must go into an all-time sketch the partition holds, not into the evicted one.
func TestAllTimeSketchLookedUpAgainAfterEviction(t *testing.T) {
	t1 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ts := t1.UnixMilli()
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 0, 0)
	p.process(0, view("i", "a", ts), t1)
	p.process(1, view("i", "b", ts-86_400_000), t1.Add(-2*time.Minute)) // the clock stepped back
	markSketched(p, t1.Add(30*time.Second), time.Minute)
	foldAll(p)
	markSketched(p, t1.Add(30*time.Second), time.Minute)
	day := sketchKey{"i", int32(ts / 86_400_000)}
	if _, ok := p.sketches[day]; !ok || len(p.sketches) != 1 {
		t.Fatalf("got %d sketches after eviction; want only the day sketch %v", len(p.sketches), day)
	}
	p.process(2, view("i", "c", ts), t1.Add(30*time.Second))
	all := p.sketches[sketchKey{"i", allTime}]
	if all == nil || all.viewers.estimate() != 1 || !all.dirty() {
		t.Fatalf("got all-time sketch %+v after a view; want a dirty one holding 1 viewer", all)
	}
	if p.sketches[day].all != all {
		t.Errorf("got the day sketch pointing at another all-time sketch; want the one the partition holds")
	}
}

// A fold cycle queues the sketches with unfolded deltas at its start, folds them a share per
// sketch interval, and ends at the sketch checkpoint of its start; a sketch that gets deltas
// meanwhile waits for the next cycle, and an unfolded sketch never leaves memory.
func TestFoldCycle(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := newPartition(0, 30*time.Minute, 10*time.Minute, 0, 0)
	for i := range 5 {
		p.process(int64(i), view("item-"+strconv.Itoa(i), "v", t0.UnixMilli()), t0)
	}
	markSketched(p, t0, time.Minute) // deltas of 10 sketches (5 items, day and all time)
	took := map[sketchKey]bool{}
	for round, want := range []int{4, 4, 2} {
		keys := p.foldTake(3)
		if len(keys) != want {
			t.Fatalf("round %d: got %d keys; want %d", round, len(keys), want)
		}
		for _, k := range keys {
			took[k] = true
			p.sketches[k].unfolded = false
		}
		if round == 0 { // new deltas during the cycle
			p.process(5, view("item-new", "v", t0.UnixMilli()), t0)
			markSketched(p, t0, time.Minute)
		}
		if done := p.foldDone(); done != (round == 2) {
			t.Errorf("round %d: got done %v; want %v", round, done, round == 2)
		}
	}
	if len(took) != 10 || p.foldFrom != 5 {
		t.Errorf("got %d keys folded, cycle end %d; want 10 and 5 (the sketch checkpoint at its start)", len(took), p.foldFrom)
	}
	p.folded = p.foldFrom
	markSketched(p, t0.Add(time.Hour), time.Minute) // idle: folded sketches leave memory
	if len(p.sketches) != 2 {
		t.Errorf("got %d sketches in memory; want the 2 of item-new, not folded yet", len(p.sketches))
	}
	if keys := p.foldTake(3); len(keys) != 1 || p.foldFrom != 6 {
		t.Errorf("got next cycle %v ending at %d; want one of item-new's 2 keys per round, ending at 6", keys, p.foldFrom)
	}
}

// A sketch's estimate is computed again after new viewers: at once while it is small, else once
// they reach 1% of it and the last estimate is estimateEvery old, and at any rate by a final
// write (the partition leaves: no later owner knows the stored estimate is stale).
func TestSketchEstimateRecomputed(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := uint64(7)
	next := func() uint64 { h = h*6364136223846793005 + 1442695040888963407; return h }
	grown := func(n int) *sketch {
		s := &sketch{}
		for range n {
			s.insert(next(), t0)
		}
		s.current(t0, false)
		return s
	}
	tests := []struct {
		name       string
		whole      int
		added      int
		after      time.Duration
		final      bool
		recomputed bool
	}{
		{"small: at once", 50, 1, time.Second, false, true},
		{"large, few new viewers", 5000, 10, time.Hour, false, false},
		{"large, 1% new but recent", 5000, 60, 10 * time.Second, false, false},
		{"large, 1% new and old enough", 5000, 60, estimateEvery, false, true},
		{"nothing new", 50, 0, time.Hour, false, false},
		{"final write, few new viewers", 5000, 10, time.Second, true, true},
		{"final write, 1% new but recent", 5000, 60, time.Second, true, true},
		{"final write, nothing new", 5000, 0, time.Second, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := grown(tt.whole)
			before := s.estimate
			for range tt.added {
				s.insert(next(), t0)
			}
			got := s.current(t0.Add(tt.after), tt.final)
			if recomputed := s.estimatedAt != t0.UnixNano(); recomputed != tt.recomputed {
				t.Errorf("got %d after %d (recomputed %v); want recomputed %v (sketch's own %d)", got, before, recomputed, tt.recomputed, s.viewers.estimate())
			}
			if tt.recomputed && got != s.viewers.estimate() {
				t.Errorf("got %d recomputed; want the sketch's own %d", got, s.viewers.estimate())
			}
		})
	}
}

// markSketched is what a sketch write that succeeded does to p: its deltas taken and its sketch
// checkpoint moved to the end of what it processed.
func markSketched(p *partition, now time.Time, idle time.Duration) {
	p.takeDeltas(now, idle)
	p.sketched = p.next
}

// Deltas taken for a write that failed are given back: merged into the viewers added since, or
// dropped with a sketch folded and evicted meanwhile (the fold wrote them in the whole sketch).
func TestRestoreDeltasAfterAFailedWrite(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ts := t0.UnixMilli()
	tests := []struct {
		name        string
		viewerAfter bool // a view of the item while the write was under way
		folded      bool // the item folded and evicted while the write was under way
		want        uint64
	}{
		{"clean since", false, false, 1},
		{"viewers added since", true, false, 2},
		{"folded and evicted since", false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartition(0, 30*time.Minute, 10*time.Minute, 0, 0)
			p.process(0, view("i", "a", ts), t0)
			sketchDeltaRows([]*partition{p}, t0, false) // as the write does: the estimates are computed
			taken := p.takeDeltas(t0, time.Minute)
			if len(p.listed) != 0 {
				t.Fatalf("got %d sketches listed after their deltas were taken; want none", len(p.listed))
			}
			if len(taken) != 2 || !p.sketchesPending(t0, false) {
				t.Fatalf("got %d deltas taken, sketches pending %v; want 2 (day and all time) and true (checkpoint not moved)", len(taken), p.sketchesPending(t0, false))
			}
			if tt.viewerAfter {
				p.process(1, view("i", "b", ts), t0)
			}
			if tt.folded {
				foldAll(p)
				p.takeDeltas(t0.Add(time.Hour), time.Minute)
			}
			if err := p.restoreDeltas(taken); err != nil {
				t.Fatal(err)
			}
			all := p.sketches[sketchKey{"i", allTime}]
			var got uint64
			if all != nil && all.dirty() {
				got = all.delta.sketch().Estimate()
			}
			if got != tt.want {
				t.Errorf("got %d viewers in the all-time delta; want %d", got, tt.want)
			}
			rows, _ := sketchDeltaRows([]*partition{p}, t0, false)
			if owed := tt.want > 0; owed != slices.ContainsFunc(rows, func(r sketchRow) bool { return r.key == sketchKey{"i", allTime} }) {
				t.Errorf("got rows %+v for the next write; want the all-time delta among them: %v", rows, owed)
			}
		})
	}
}

// A delta holds its viewers' hashes up to deltaHashes, then a sketch; merged or not, it holds
// every viewer it took, and each row encodes its own delta alone (the scratch sketch is reset).
func TestViewerDelta(t *testing.T) {
	h := uint64(11)
	next := func() uint64 { h = h*6364136223846793005 + 1442695040888963407; return h }
	tests := []struct {
		name string
		a, b int // viewers of the delta and of the one merged into it
	}{
		{"few", 3, 0},
		{"at the bound", deltaHashes, 0},
		{"few merged into few", 10, 20},
		{"many merged into few", 5, 2 * deltaHashes},
		{"few merged into many", 2 * deltaHashes, 5},
		{"many merged into many", 600, 900},
	}
	var rows []sketchRow
	var want []uint64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d, o viewerDelta
			all := hyperloglog.New14()
			for range tt.a {
				x := next()
				d.add(x)
				all.InsertHash(x)
			}
			for range tt.b {
				x := next()
				o.add(x)
				all.InsertHash(x)
			}
			if err := d.merge(o); err != nil {
				t.Fatal(err)
			}
			spilled := tt.a+tt.b >= deltaHashes
			if (d.hll != nil) != spilled || len(d.hashes) >= deltaHashes || d.hll != nil && len(d.hashes) > 0 {
				t.Errorf("got %d hashes and sketch %v; want a sketch alone: %v", len(d.hashes), d.hll != nil, spilled)
			}
			if got, want := d.sketch().Estimate(), all.Estimate(); got != want {
				t.Errorf("got %d viewers; want %d", got, want)
			}
			rows = append(rows, sketchRow{key: sketchKey{tt.name, 1}, delta: d}, sketchRow{key: sketchKey{tt.name, 2}})
			want = append(want, all.Estimate(), 0)
		})
	}
	if err := encodeSketchRows(rows); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		sk, err := viewersketch.Decode([]byte(r.blob))
		if err != nil {
			t.Fatalf("row %d (%v): %v", i, r.key, err)
		}
		if got := sk.Estimate(); got != want[i] {
			t.Errorf("row %d (%v) encodes %d viewers; want %d", i, r.key, got, want[i])
		}
	}
}

// A sketch's viewers are hashes while few and a HyperLogLog sketch beyond: either way its
// estimate, its stored form and a stored sketch merged into it answer what a HyperLogLog sketch
// of the same viewers answers from the first viewer on.
func TestFewViewersActAsASketch(t *testing.T) {
	h := uint64(11)
	next := func() uint64 { h = h*6364136223846793005 + 1442695040888963407; return h }
	for _, n := range []int{0, 1, 2, fewViewers - 1, fewViewers, fewViewers + 1, 100, 5000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			var v viewers
			want := hyperloglog.New14()
			for i := range n {
				x := next()
				v.add(x)
				want.InsertHash(x)
				if i%3 == 0 { // a viewer seen again
					v.add(x)
					want.InsertHash(x)
				}
			}
			if got := v.hll == nil; got != (n <= fewViewers) {
				t.Errorf("held as hashes: got %v; want %v with %d viewers", got, n <= fewViewers, n)
			}
			if got, w := v.estimate(), want.Estimate(); got != w {
				t.Errorf("estimate: got %d; want %d as the sketch's", got, w)
			}
			blob, err := v.marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := viewersketch.Decode(blob)
			if err != nil {
				t.Fatal(err)
			}
			if got, w := back.Estimate(), want.Estimate(); got != w {
				t.Errorf("stored form's estimate: got %d; want %d", got, w)
			}
			stored := hyperloglog.New14()
			for range 40 {
				x := next()
				stored.InsertHash(x)
				want.InsertHash(x)
			}
			if err := v.dense().Merge(stored); err != nil {
				t.Fatal(err)
			}
			if got, w := v.estimate(), want.Estimate(); got != w || v.few != nil {
				t.Errorf("after a stored sketch merged in: got %d (hashes %d); want %d, no hashes", got, len(v.few), w)
			}
		})
	}
}
