package dedupe

import (
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

// TestRestoreGivesSameDecisions is the property the exactly-once design rests on: state made of
// the watermark plus every counted (pair, time) at or after LiveSince, restored into a fresh
// window, answers every later event exactly as the uninterrupted window does.
func TestRestoreGivesSameDecisions(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run("", func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			events := randomEvents(rng, 5000)
			cut := rng.IntN(len(events))
			whole := New(win, grac)
			var counted []struct {
				k uint64
				t int64
			}
			for _, e := range events[:cut] {
				k := Key(e.viewer, e.item)
				if whole.Observe(k, e.t) {
					counted = append(counted, struct {
						k uint64
						t int64
					}{k, e.t})
				}
			}
			whole.Evict()
			restored := New(win, grac)
			restored.Restore(whole.Watermark())
			for _, c := range counted {
				if c.t >= whole.LiveSince() {
					restored.RestorePair(c.k, c.t)
				}
			}
			for i, e := range events[cut:] {
				k := Key(e.viewer, e.item)
				if got, want := restored.Observe(k, e.t), whole.Observe(k, e.t); got != want {
					t.Fatalf("seed %d cut %d event %d: got counts=%v after restore; want %v", seed, cut, i, got, want)
				}
			}
		})
	}
}

func randomEvents(rng *rand.Rand, n int) []ev {
	t := int64(1_800_000_000_000)
	out := make([]ev, n)
	for i := range out {
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
