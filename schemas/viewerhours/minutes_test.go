package viewerhours

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// An Hour keeps each minute's viewers apart, its hour registers are their union, and merging
// Hours (a write given back after a failure) is a union minute by minute: with one minute (the
// usual interval) and with several.
func TestHourKeepsMinutes(t *testing.T) {
	for _, minutes := range [][]int{{12}, {59, 3, 3, 7}} {
		t.Run(fmt.Sprint(minutes), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			var hr, later Hour
			var want [MinutesPerHour]Registers
			var all Registers
			for i := range 40_000 {
				m, h := minutes[i%len(minutes)], rng.Uint64()
				if i%3 == 0 {
					later.Add(m, h)
				} else {
					hr.Add(m, h)
				}
				want[m].Add(h)
				all.Add(h)
			}
			hr.Merge(&later)

			regs, rs, keys, ranks := hr.Pairs()
			if !slices.IsSorted(keys) || !slices.IsSorted(regs) {
				t.Errorf("pairs not ordered by key and by register")
			}
			var got [MinutesPerHour]Registers
			for i, k := range keys {
				m, reg, ok := SplitKey(k)
				if !ok {
					t.Fatalf("key %d: got no minute; want one of %v", k, minutes)
				}
				got[m].Set(reg, ranks[i])
			}
			for m := range MinutesPerHour {
				if g, w := got[m].Estimate(), want[m].Estimate(); g != w {
					t.Errorf("minute %d: got %d viewers; want %d", m, g, w)
				}
			}
			var hour Registers
			for i := range regs {
				hour.Set(regs[i], rs[i])
			}
			if g, w := hour.Estimate(), all.Estimate(); g != w {
				t.Errorf("hour: got %d viewers; want %d, the union of its minutes", g, w)
			}
		})
	}
}

func TestSplitKey(t *testing.T) {
	tests := []struct {
		key    uint32
		minute int
		reg    uint16
		ok     bool
	}{
		{MinuteKey(0, 0), 0, 0, true},
		{MinuteKey(59, Count-1), 59, Count - 1, true},
		{MinuteKey(17, 1234), 17, 1234, true},
		{MinuteKey(60, 0), 60, 0, false},
		{^uint32(0), int(^uint32(0) >> Precision), Count - 1, false},
	}
	for _, tt := range tests {
		m, reg, ok := SplitKey(tt.key)
		if m != tt.minute || reg != tt.reg || ok != tt.ok {
			t.Errorf("SplitKey(%d): got %d, %d, %v; want %d, %d, %v", tt.key, m, reg, ok, tt.minute, tt.reg, tt.ok)
		}
	}
}
