package viewerhours

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The estimate stays within 3 standard errors (0.8% each) of the true count, from one viewer
// to millions, across the switch from a list of registers to a dense array.
func TestEstimateWithinItsError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 10, 63, 64, 65, 100, 1_000, 10_000, 30_000, 60_000, 100_000, 1_000_000, 3_000_000} {
		var r Registers
		for range n {
			r.Add(rng.Uint64())
		}
		got := r.Estimate()
		if diff := math.Abs(float64(got) - float64(n)); diff > max(1, 0.024*float64(n)) {
			t.Errorf("%d viewers: got an estimate of %d; want within 2.4%%", n, got)
		}
	}
	var empty Registers
	if got := empty.Estimate(); got != 0 {
		t.Errorf("empty sketch: got %d; want 0", got)
	}
}

// Merging sketches is their union: viewers in both count once, whatever the order, and a
// sketch rebuilt from its stored pairs estimates as the original.
func TestMergeIsUnion(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a, b, all Registers
	for i := range 50_000 {
		h := rng.Uint64()
		all.Add(h)
		if i < 30_000 {
			a.Add(h)
		}
		if i >= 20_000 {
			b.Add(h)
		}
	}
	var ab, ba Registers
	ab.Merge(&a)
	ab.Merge(&b)
	ba.Merge(&b)
	ba.Merge(&a)
	if ab.Estimate() != all.Estimate() || ba.Estimate() != all.Estimate() {
		t.Errorf("union: got %d and %d; want %d, the sketch of all viewers", ab.Estimate(), ba.Estimate(), all.Estimate())
	}
	regs, ranks := all.Pairs()
	var back Registers
	for i := range regs {
		back.Set(regs[i], ranks[i])
	}
	if back.Estimate() != all.Estimate() {
		t.Errorf("from its pairs: got %d; want %d", back.Estimate(), all.Estimate())
	}
	if !slices.IsSorted(regs) {
		t.Errorf("pairs not ordered by register")
	}
}

func TestRegister(t *testing.T) {
	tests := []struct {
		h        uint64
		reg      uint16
		rank     uint8
		describe string
	}{
		{0, 0, q + 1, "all zeros: the highest rank"},
		{math.MaxUint64, Count - 1, 1, "all ones"},
		{1 << (q - 1), 0, 1, "the first rank bit set"},
		{1, 0, q, "only the last bit set"},
		{uint64(5)<<q | 1<<(q-3), 5, 3, "register 5, two zeros first"},
	}
	for _, tt := range tests {
		reg, rank := Register(tt.h)
		if reg != tt.reg || rank != tt.rank {
			t.Errorf("%s: got register %d rank %d; want %d, %d", tt.describe, reg, rank, tt.reg, tt.rank)
		}
	}
}

// Stored rows are outside input: ranks past the highest and registers out of range never panic.
func FuzzSet(f *testing.F) {
	f.Add(uint16(3), uint8(200))
	f.Fuzz(func(t *testing.T, reg uint16, rank uint8) {
		var r Registers
		for i := range sparseMax + 1 {
			r.Set(uint16(i), 1)
		}
		r.Set(reg, rank)
		_ = r.Estimate()
	})
}
