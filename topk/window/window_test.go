package window

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/tallypipeline/tally/schemas"
)

type rec struct {
	key string
	sec int64
	n   uint64
}

// oracle computes window spec's list at the bucket holding nowSec straight from every record:
// the counts of the complete buckets [end-N, end), sorted in list order.
func oracle(recs []rec, spec Spec, nowSec int64, k int) []Entry {
	end := schemas.FloorDiv(nowSec, spec.BucketSeconds)
	sum := map[string]uint64{}
	for _, r := range recs {
		if b := schemas.FloorDiv(r.sec, spec.BucketSeconds); b >= end-spec.Buckets && b < end {
			sum[r.key] += r.n
		}
	}
	var out []Entry
	for key, n := range sum {
		out = append(out, Entry{key, n})
	}
	slices.SortFunc(out, compare)
	return out[:min(k, len(out))]
}

// TestTopEqualsOracle feeds a skewed workload with late and early records, advancing the clock
// as it goes, and compares every list with the oracle's after each step.
func TestTopEqualsOracle(t *testing.T) {
	const k = 20
	specs := []Spec{OneMinute, OneHour}
	start := int64(1_796_000_000)
	for _, shards := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(shards)))
			zipf := rand.NewZipf(rng, 1.2, 1, 2000)
			s := New(specs, shards, start)
			var recs []rec
			now := start
			for step := range 400 {
				for range 200 {
					// Mostly recent, some late by up to 90 minutes, a few a little ahead.
					sec := now - rng.Int64N(30)
					switch rng.IntN(10) {
					case 0:
						sec = now - rng.Int64N(5400)
					case 1:
						sec = now + rng.Int64N(20)
					}
					r := rec{fmt.Sprintf("k%d", zipf.Uint64()), sec, uint64(1 + rng.IntN(3))}
					recs = append(recs, r)
					s.Add(r.key, r.sec, r.n)
				}
				now += 1 + rng.Int64N(25)
				s.Advance(now)
				if step%10 != 9 {
					continue
				}
				for w, sp := range specs {
					got, want := s.Top(w, k, k), oracle(recs, sp, now, k)
					if !slices.Equal(got, want) {
						t.Fatalf("step %d window %s: got %v; want %v", step, sp.Name, got, want)
					}
				}
			}
			// Keys that left every window leave memory.
			now += 2 * 3600
			s.Advance(now)
			if st := s.Stats(); st.Keys != 0 || st.Entries != 0 {
				t.Errorf("after every window passed: got %d keys, %d entries; want 0, 0", st.Keys, st.Entries)
			}
		})
	}
}

// TestMergeConditionMatters checks the stated condition both ways on a workload where one
// shard holds every heavy key: with each shard contributing c = k candidates the merged list is
// exact; with c < k it is not (the condition is needed, not just sufficient).
func TestMergeConditionMatters(t *testing.T) {
	const k, shards = 10, 4
	now := int64(1_796_000_000)
	s := New([]Spec{OneMinute}, shards, now)
	var recs []rec
	var heavy, light []string
	for i := 0; len(heavy) < k || len(light) < k; i++ {
		key := fmt.Sprintf("key-%d", i)
		if xxhash.Sum64String(key)%shards == 0 {
			heavy = append(heavy, key)
		} else {
			light = append(light, key)
		}
	}
	for i, key := range heavy[:k] {
		recs = append(recs, rec{key, now - 10, uint64(100 + i)})
	}
	for i, key := range light[:k] {
		recs = append(recs, rec{key, now - 10, uint64(1 + i)})
	}
	for _, r := range recs {
		s.Add(r.key, r.sec, r.n)
	}
	s.Advance(now)
	want := oracle(recs, OneMinute, now, k)
	tests := []struct {
		c         int
		wantExact bool
	}{{k, true}, {k + 5, true}, {k - 1, false}, {1, false}}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("c=%d", tt.c), func(t *testing.T) {
			got := s.Top(0, k, tt.c)
			if exact := slices.Equal(got, want); exact != tt.wantExact {
				t.Errorf("got exact=%v (%v); want exact=%v (%v)", exact, got, tt.wantExact, want)
			}
		})
	}
}

// TestRestoreFromEach rebuilds a set from its bucket counts and checks the lists agree.
func TestRestoreFromEach(t *testing.T) {
	now := int64(1_796_000_000)
	a := New([]Spec{OneMinute, OneHour}, 4, now)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		a.Add(fmt.Sprintf("k%d", rng.IntN(300)), now-rng.Int64N(4000)+60, uint64(1+rng.IntN(5)))
	}
	b := New([]Spec{OneMinute, OneHour}, 7, now)
	a.Each(func(w int, start int64, key string, n uint64) { b.AddBucket(w, start, key, n) })
	now += 100
	a.Advance(now)
	b.Advance(now)
	for w := range 2 {
		if got, want := b.Top(w, 50, 50), a.Top(w, 50, 50); !slices.Equal(got, want) {
			t.Errorf("window %d: got %v; want %v", w, got, want)
		}
	}
}
