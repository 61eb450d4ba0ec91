package approx

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestBoundHoldsOnSkewedWorkload runs Zipf-distributed weighted counts over 31 hours (so hours
// leave the window) through a sketch far smaller than the key space, then checks the stated
// bound against exact counts: every listed estimate within B of the truth, B <= N/m, and no key
// left out whose true count exceeds the last listed count plus B.
func TestBoundHoldsOnSkewedWorkload(t *testing.T) {
	tests := []struct {
		name  string
		m     int
		keys  uint64
		skew  float64
		heavy int // the true top `heavy` keys must all be listed
	}{
		{"zipf 1.1, m=256", 256, 100_000, 1.1, 10},
		{"zipf 1.5, m=1024", 1024, 200_000, 1.5, 50},
		{"zipf 1.01, m=128", 128, 50_000, 1.01, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const k = 100
			rng := rand.New(rand.NewPCG(7, tt.keys))
			zipf := rand.NewZipf(rng, tt.skew, 1, tt.keys-1)
			start := int64(1_796_000_400) / 3600 * 3600
			s := New(tt.m, start)
			truth := map[string]uint64{}
			// 31 hours: the window at the end is hours 6 to 29, complete, and 30, in progress.
			for h := range int64(31) {
				s.Advance(start + h*3600)
				for range 20_000 {
					sec := start + h*3600 + rng.Int64N(3600)
					key := fmt.Sprintf("key-%d", zipf.Uint64())
					n := uint64(1 + rng.IntN(4))
					s.Add(key, sec, n)
					if h >= 30-Hours {
						truth[key] += n
					}
				}
			}
			list, bound, total := s.Top(k)
			var n uint64
			for _, c := range truth {
				n += c
			}
			if total != n {
				t.Fatalf("got %d events in the window; want %d", total, n)
			}
			if max := n / uint64(tt.m); bound > max {
				t.Errorf("got bound %d; want at most N/m = %d", bound, max)
			}
			if len(list) != k {
				t.Fatalf("got %d entries; want %d", len(list), k)
			}
			listed := map[string]bool{}
			for _, e := range list {
				listed[e.Key] = true
				if d := absDiff(e.Count, truth[e.Key]); d > bound {
					t.Errorf("%s: got estimate %d, true %d (off by %d); want within %d", e.Key, e.Count, truth[e.Key], d, bound)
				}
			}
			last := list[len(list)-1].Count
			for key, c := range truth {
				if !listed[key] && c > last+bound {
					t.Errorf("%s left out with true count %d; want at most last %d + bound %d", key, c, last, bound)
				}
			}
			var exact []string
			for key := range truth {
				exact = append(exact, key)
			}
			slices.SortFunc(exact, func(a, b string) int { return int(truth[b]) - int(truth[a]) })
			for _, key := range exact[:tt.heavy] {
				if !listed[key] {
					t.Errorf("heavy key %s (true %d) not listed", key, truth[key])
				}
			}
			t.Logf("N=%d m=%d bound=%d (N/m=%d, %.3f%% of N) last=%d", n, tt.m, bound, n/uint64(tt.m), 100*float64(bound)/float64(n), last)
		})
	}
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestRestoreFromEach(t *testing.T) {
	now := int64(1_796_000_400)
	a := New(64, now)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		a.Add(fmt.Sprintf("k%d", rng.IntN(500)), now-rng.Int64N(30*3600), uint64(1+rng.IntN(3)))
	}
	b := New(64, now)
	a.Each(func(start int64, total uint64, cs []Counter) { b.Restore(start, total, cs) })
	la, ba, ta := a.Top(30)
	lb, bb, tb := b.Top(30)
	if !slices.Equal(la, lb) || ba != bb || ta != tb {
		t.Errorf("restored: got %v bound %d total %d; want %v bound %d total %d", lb, bb, tb, la, ba, ta)
	}
	// The restored summaries go on counting as the originals do.
	a.Add("k1", now-60, 5)
	b.Add("k1", now-60, 5)
	if x, y := fmt.Sprint(a.Top(30)), fmt.Sprint(b.Top(30)); x != y {
		t.Errorf("after one more add: got %s; want %s", y, x)
	}
}
