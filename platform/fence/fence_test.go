package fence

import (
	"fmt"
	"testing"
	"time"
)

func claim(epoch uint64, start ...int64) Claim { return Claim{Epoch: epoch, Start: start} }

func TestValidity(t *testing.T) {
	f := New([]string{"end_offset"}, []Claim{claim(2, 100), claim(1, 0), claim(3, 250)})
	tests := []struct {
		epoch uint64
		end   int64
		want  bool
	}{
		{0, 0, true},     // before any claim
		{0, 1, false},    // a pre-claim batch ending after the first claim's start
		{1, 100, true},   // the first owner's last batch before the second claimed
		{1, 101, false},  // written by the first owner after the second claimed
		{1, 300, false},  // ... also beyond the third claim
		{2, 250, true},   // the second owner up to the third claim
		{2, 251, false},  // the second owner as a zombie
		{3, 9999, true},  // the newest owner is never limited
		{4, 10000, true}, // an epoch nobody claimed yet (cannot happen): unlimited
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("epoch %d end %d", tt.epoch, tt.end), func(t *testing.T) {
			if got := f.Valid(tt.epoch, tt.end); got != tt.want {
				t.Errorf("got valid %v; want %v", got, tt.want)
			}
		})
	}
	if got, want := f.InvalidSQL(), "(epoch = 0 AND end_offset > 0) OR (epoch = 1 AND end_offset > 100) OR (epoch = 2 AND end_offset > 250)"; got != want {
		t.Errorf("got invalid condition %q; want %q", got, want)
	}
	// Every epoch, also one no claim names any more (its row lost), by the claims that remain.
	if got, want := f.AnyInvalidSQL(), "(epoch < 1 AND end_offset > 0) OR (epoch < 2 AND end_offset > 100) OR (epoch < 3 AND end_offset > 250)"; got != want {
		t.Errorf("got invalid condition over every epoch %q; want %q", got, want)
	}
	if got, want := f.MaxEpoch(), uint64(3); got != want {
		t.Errorf("got max epoch %d; want %d", got, want)
	}
	if got := New([]string{"end_offset"}, nil).InvalidSQL(); got != "0" {
		t.Errorf("got %q without claims; want 0", got)
	}
}

// A batch of two topics is a zombie's when it ends after a later claim's start in either.
func TestValidityOverTwoColumns(t *testing.T) {
	f := New([]string{"clicks_end", "verdicts_end"}, []Claim{claim(1, 0, 0), claim(2, 10, 4), claim(3, 20, 3)})
	tests := []struct {
		epoch    uint64
		clicks   int64
		verdicts int64
		want     bool
	}{
		{1, 10, 3, true},
		{1, 11, 3, false},
		{1, 10, 4, false}, // the third claim started verdicts at 3
		{2, 20, 3, true},
		{2, 20, 4, false},
		{3, 99, 99, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("epoch %d ends %d %d", tt.epoch, tt.clicks, tt.verdicts), func(t *testing.T) {
			if got := f.Valid(tt.epoch, tt.clicks, tt.verdicts); got != tt.want {
				t.Errorf("got valid %v; want %v", got, tt.want)
			}
		})
	}
	want := "(epoch < 1 AND (clicks_end > 0 OR verdicts_end > 0)) OR (epoch < 2 AND (clicks_end > 10 OR verdicts_end > 4)) OR (epoch < 3 AND (clicks_end > 20 OR verdicts_end > 3))"
	if got := f.AnyInvalidSQL(); got != want {
		t.Errorf("got %q; want %q", got, want)
	}
	g := f.With(claim(4, 30, 5))
	if got, want := g.MaxEpoch(), uint64(4); got != want || f.MaxEpoch() != 3 {
		t.Errorf("got max epochs %d (with) and %d (before); want %d and 3", got, f.MaxEpoch(), want)
	}
}

func TestLookback(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := New([]string{"end_offset"}, []Claim{{Epoch: 1, Start: []int64{0}, At: t0}, {Epoch: 2, Start: []int64{40}, At: t0.Add(time.Minute)},
		{Epoch: 3, Start: []int64{100}, At: t0.Add(2 * time.Minute)}})
	tests := []struct {
		name  string
		since time.Time
		upTo  int64
		want  int64
	}{
		{"every claim recent", t0, 100, 0},
		{"the two newest recent", t0.Add(time.Minute), 100, 40},
		{"only the newest recent", t0.Add(2 * time.Minute), 100, 100},
		{"none recent: upTo", t0.Add(time.Hour), 70, 70},
		{"upTo below every recent start", t0, -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := f.Lookback(tt.since, tt.upTo); got != tt.want {
				t.Errorf("got lookback %d; want %d", got, tt.want)
			}
		})
	}
}
