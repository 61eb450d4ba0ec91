package dedupe

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const (
	min  = int64(time.Minute / time.Millisecond)
	win  = 30 * min
	grac = 10 * min
)

type ev struct {
	viewer, item string
	t            int64
	counts       bool
}

func TestObserve(t *testing.T) {
	t0 := int64(1_800_000_000_000)
	tests := []struct {
		name   string
		events []ev
	}{
		{"first view counts", []ev{{"v", "i", t0, true}}},
		{"repeat inside window", []ev{{"v", "i", t0, true}, {"v", "i", t0 + 29*min, false}}},
		{"exact retry", []ev{{"v", "i", t0, true}, {"v", "i", t0, false}}},
		{"at window end counts", []ev{{"v", "i", t0, true}, {"v", "i", t0 + win, true}}},
		{"window anchored at counted view, not at duplicates", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 20*min, false}, {"v", "i", t0 + 40*min, true}, {"v", "i", t0 + 60*min, false}, {"v", "i", t0 + 70*min, true}}},
		{"other item independent", []ev{{"v", "i", t0, true}, {"v", "j", t0, true}}},
		{"other viewer independent", []ev{{"v", "i", t0, true}, {"w", "i", t0, true}}},
		{"late inside window is duplicate", []ev{{"v", "i", t0, true}, {"v", "i", t0 - 10*min, false}}},
		{"late beyond window counts", []ev{{"v", "i", t0, true}, {"v", "i", t0 - 31*min, true}}},
		{"late count keeps newest anchor", []ev{{"v", "i", t0, true}, {"v", "i", t0 - 31*min, true}, {"v", "i", t0 + 20*min, false}}},
		{"state forgotten beyond window+grace", []ev{
			{"v", "i", t0, true}, {"x", "y", t0 + 41*min, true}, {"v", "i", t0 + 5*min, true}}},
		{"state kept within window+grace", []ev{
			{"v", "i", t0, true}, {"x", "y", t0 + 39*min, true}, {"v", "i", t0 + 5*min, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := New(win, grac)
			for i, e := range tt.events {
				if got := w.Observe(Key(e.viewer, e.item), e.t); got != e.counts {
					t.Errorf("event %d (%s,%s,%+dm): got counts=%v; want %v", i, e.viewer, e.item, (e.t-t0)/min, got, e.counts)
				}
			}
		})
	}
}

func TestKeySeparatesFields(t *testing.T) {
	if Key("ab", "c") == Key("a", "bc") {
		t.Error("got equal keys for (ab,c) and (a,bc); want the separator to tell them apart")
	}
	if Key("v", "i") != Key("v", "i") {
		t.Error("got different keys for one pair; want a stable hash")
	}
}

// TestObserveHeldViews covers the views of a pair held besides its newest counted one: with a
// grace of an hour (window + grace = 90 minutes) up to four counted views of a pair are held.
func TestObserveHeldViews(t *testing.T) {
	t0 := int64(1_800_000_000_000)
	const grace = 60 * min
	tests := []struct {
		name   string
		events []ev
	}{
		{"repeat of an older counted view after a newer window opened", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 40*min, true}, {"v", "i", t0 + 10*min, false}}},
		{"exact retry of an older counted view after a newer window opened", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 40*min, true}, {"v", "i", t0, false}, {"v", "i", t0, false}}},
		{"exact retry of the newest counted view", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 40*min, true}, {"v", "i", t0 + 40*min, false}}},
		{"a window from both neighbours counts", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 60*min, true}, {"v", "i", t0 + 30*min, true},
			{"v", "i", t0 + 30*min, false}, {"v", "i", t0 + 15*min, false}, {"v", "i", t0 + 45*min, false}}},
		{"just inside the window of the older one", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 60*min, true}, {"v", "i", t0 + 30*min - 1, false}, {"v", "i", t0 + 30*min + 1, false}}},
		{"late before the oldest counted view", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 40*min, true}, {"v", "i", t0 - 30*min, true},
			{"v", "i", t0 - 31*min, false}, {"v", "i", t0 - 29*min, false}, {"v", "i", t0 - 60*min, true}}},
		{"four windows held", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 30*min, true}, {"v", "i", t0 + 60*min, true}, {"v", "i", t0 + 90*min, true},
			{"v", "i", t0, false}, {"v", "i", t0 + 10*min, false}, {"v", "i", t0 + 45*min, false}, {"v", "i", t0 + 75*min, false}}},
		{"held at exactly window+grace", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 40*min, true}, {"x", "y", t0 + 90*min, true}, {"v", "i", t0, false}}},
		{"forgotten beyond window+grace", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 40*min, true}, {"x", "y", t0 + 90*min + 1, true},
			{"v", "i", t0, true}, {"v", "i", t0 + 10*min, true}, {"v", "i", t0 + 40*min, false}, {"v", "i", t0 + 11*min, false}}},
		{"a forgotten view counted again is not held", []ev{
			{"v", "i", t0, true}, {"x", "y", t0 + 100*min, true}, {"v", "i", t0, true}, {"v", "i", t0, true}}},
		{"newest forgotten, a late view starts afresh", []ev{
			{"v", "i", t0, true}, {"v", "i", t0 + 30*min, true}, {"x", "y", t0 + 121*min, true},
			{"v", "i", t0 + 40*min, true}, {"v", "i", t0 + 60*min, false}, {"v", "i", t0 + 9*min, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := New(win, grace)
			for i, e := range tt.events {
				if got := w.Observe(Key(e.viewer, e.item), e.t); got != e.counts {
					t.Errorf("event %d (%s,%s,%+v): got counts=%v; want %v", i, e.viewer, e.item, time.Duration(e.t-t0)*time.Millisecond, got, e.counts)
				}
			}
		})
	}
}

// oracle is the dedupe rule of docs/EXACTLY_ONCE.md written plainly: every counted time of every
// pair, string keys, liveness checked at each decision.
type oracle struct {
	window, horizon, watermark int64
	counted                    map[string][]int64
}

func newOracle(window, grace int64) *oracle {
	return &oracle{window: window, horizon: window + grace, watermark: math.MinInt64, counted: map[string][]int64{}}
}

func (o *oracle) observe(viewer, item string, t int64) bool {
	o.watermark = max(o.watermark, t)
	key := viewer + "\x00" + item
	for _, c := range o.counted[key] {
		if c >= o.watermark-o.horizon && t-c < o.window && c-t < o.window {
			return false
		}
	}
	o.counted[key] = append(o.counted[key], t)
	return true
}

// graces are the dedupe graces the randomized tests run with: none, the default, and one longer
// than the window (so that a pair holds several counted views).
var graces = []int64{0, grac, 60 * min}

// TestObserveMatchesOracle runs random out-of-order streams with exact retries through a Window,
// evicting at random moments, and through the oracle: every decision must agree.
func TestObserveMatchesOracle(t *testing.T) {
	for _, grace := range graces {
		for seed := uint64(1); seed <= 10; seed++ {
			t.Run(fmt.Sprintf("grace %dm seed %d", grace/min, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 100+seed))
				w, o := New(win, grace), newOracle(win, grace)
				for i, e := range randomEvents(rng, 5000) {
					if got, want := w.Observe(Key(e.viewer, e.item), e.t), o.observe(e.viewer, e.item, e.t); got != want {
						t.Fatalf("event %d (%s,%s,%d): got counts=%v; want %v (oracle)", i, e.viewer, e.item, e.t, got, want)
					}
					if rng.IntN(50) == 0 {
						w.Evict()
					}
				}
			})
		}
	}
}

// TestRestoreGivesSameDecisions is the property the exactly-once design rests on: state made of
// the watermark plus every counted (pair, time) at or after LiveSince, restored into a fresh
// window in any order, possibly more than once, with or without forgotten ones (as loaded from
// dedupe_state), answers every later event exactly as the uninterrupted window does, and as the
// rule does.
func TestRestoreGivesSameDecisions(t *testing.T) {
	type counted struct {
		k uint64
		t int64
	}
	for _, grace := range graces {
		multi := 0 // cuts at which some pair had more than one live counted view
		for seed := uint64(1); seed <= 20; seed++ {
			t.Run(fmt.Sprintf("grace %dm seed %d", grace/min, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, seed))
				events := randomEvents(rng, 5000)
				cut := rng.IntN(len(events))
				whole, o := New(win, grace), newOracle(win, grace)
				var rows []counted
				for _, e := range events[:cut] {
					k := Key(e.viewer, e.item)
					o.observe(e.viewer, e.item, e.t)
					if whole.Observe(k, e.t) {
						rows = append(rows, counted{k, e.t})
					}
				}
				whole.Evict()
				live := map[uint64]int{}
				var restore []counted
				for _, c := range rows {
					if c.t >= whole.LiveSince() {
						live[c.k]++
						restore = append(restore, c)
						if rng.IntN(4) == 0 { // written again by a replayed batch
							restore = append(restore, c)
						}
					} else if rng.IntN(4) == 0 { // forgotten: changes nothing
						restore = append(restore, c)
					}
				}
				for _, n := range live {
					if n > 1 {
						multi++
						break
					}
				}
				rng.Shuffle(len(restore), func(i, j int) { restore[i], restore[j] = restore[j], restore[i] })
				restored := New(win, grace)
				restored.Restore(whole.Watermark())
				for _, c := range restore {
					restored.RestorePair(c.k, c.t)
				}
				for i, e := range events[cut:] {
					k := Key(e.viewer, e.item)
					got, want, rule := restored.Observe(k, e.t), whole.Observe(k, e.t), o.observe(e.viewer, e.item, e.t)
					if got != want || got != rule {
						t.Fatalf("cut %d event %d: got counts=%v after restore; want %v as uninterrupted, %v by the rule", cut, i, got, want, rule)
					}
				}
			})
		}
		if grace > 0 && multi < 5 {
			t.Errorf("grace %dm: got %d of 20 cuts with a pair holding two live counted views; want at least 5, so that the test covers them", grace/min, multi)
		}
	}
}

// randomEvents is a stream over 32 pairs, a view every minute on average: one in ten late by
// up to an hour, one in ten an exact retry of one of the last 200 views.
func randomEvents(rng *rand.Rand, n int) []ev {
	t := int64(1_800_000_000_000)
	out := make([]ev, n)
	for i := range out {
		if i > 0 && rng.IntN(10) == 0 {
			back := i
			if back > 200 {
				back = 200
			}
			out[i] = out[i-1-rng.IntN(back)]
			continue
		}
		t += rng.Int64N(2 * min)
		et := t
		if rng.IntN(10) == 0 { // late event
			et -= rng.Int64N(60 * min)
		}
		out[i] = ev{viewer: string(rune('a' + rng.IntN(8))), item: string(rune('A' + rng.IntN(4))), t: et}
	}
	return out
}

func TestEvictChangesNoAnswer(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	events := randomEvents(rng, 20000)
	a, b := New(win, grac), New(win, grac)
	for i, e := range events {
		k := Key(e.viewer, e.item)
		if got, want := a.Observe(k, e.t), b.Observe(k, e.t); got != want {
			t.Fatalf("event %d: got %v with eviction; want %v", i, got, want)
		}
		if i%100 == 0 {
			a.Evict()
		}
	}
	if a.Len() > b.Len() {
		t.Errorf("got %d pairs after eviction; want at most %d", a.Len(), b.Len())
	}
}

// CountKey is persisted in dedupe_state, so its values are pinned; it must differ from the keys
// of viewer pairs spelt with the same strings, and between sources and sequence numbers.
func TestCountKey(t *testing.T) {
	if got, want := CountKey("edge-1", 42), CountKey("edge-1", 42); got != want {
		t.Fatalf("got %x then %x; want the same key", got, want)
	}
	keys := map[uint64]string{
		CountKey("edge-1", 42): "edge-1/42",
		CountKey("edge-1", 43): "edge-1/43",
		CountKey("edge-2", 42): "edge-2/42",
		CountKey("", 0):        "empty/0",
		Key("edge-1", "42"):    "pair edge-1,42",
	}
	if len(keys) != 5 {
		t.Errorf("got %d distinct keys %v; want 5", len(keys), keys)
	}
	if got, want := CountKey("edge-1", 42), uint64(0x9d0b05734abeee53); got != want {
		t.Errorf("got key %#x; want %#x (keys are persisted: a change loses the dedupe state)", got, want)
	}
	w := New(30*60_000, 10*60_000)
	for i, tt := range []struct {
		key    uint64
		t      int64
		counts bool
	}{
		{CountKey("e", 1), 1_000_000, true},
		{CountKey("e", 1), 1_000_000, false}, // a retry
		{CountKey("e", 2), 1_000_000, true},
		{Key("e", "1"), 1_000_000, true},
	} {
		if got := w.Observe(tt.key, tt.t); got != tt.counts {
			t.Errorf("event %d: got counts %v; want %v", i, got, tt.counts)
		}
	}
}
