package flushpace

import (
	"testing"
	"time"
)

func TestDue(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		took       time.Duration // the last flush's duration; 0: no flush yet
		endedSince time.Duration // how long ago it ended
		want       bool
	}{
		{"fresh, interval not passed", 0, 999 * time.Millisecond, false},
		{"fresh, interval passed", 0, time.Second, true},
		{"quick flush, interval passed", 200 * time.Millisecond, 800 * time.Millisecond, true},
		{"quick flush, interval not passed", 200 * time.Millisecond, 700 * time.Millisecond, false},
		{"slow flush, just ended", 3 * time.Second, 10 * time.Millisecond, false},
		{"slow flush, consumed a third of it", 3 * time.Second, time.Second, false},
		{"slow flush, consumed half of it", 3 * time.Second, 1500 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0.Add(tt.took + tt.endedSince)
			p := New(time.Second, t0)
			if tt.took > 0 {
				if got := p.Start(t0); got != 0 {
					t.Fatalf("got %s since the previous start; want 0", got)
				}
				p.End(t0.Add(tt.took))
			}
			if got := p.Due(now); got != tt.want {
				t.Errorf("got Due %v; want %v", got, tt.want)
			}
		})
	}
}

func TestStartReturnsTimeSincePreviousStart(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := New(time.Second, t0)
	p.Start(t0.Add(time.Second))
	p.End(t0.Add(3 * time.Second))
	if got, want := p.Start(t0.Add(5*time.Second)), 4*time.Second; got != want {
		t.Errorf("got %s; want %s", got, want)
	}
}

func TestSlot(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name    string
		every   time.Duration
		first   time.Time
		flushes []int  // ms after t0
		want    []bool // due at each flush (then done when due)
	}{
		{"before the first point", 5 * time.Second, at(2500), []int{0, 2499}, []bool{false, false}},
		{"at and after the first point", 5 * time.Second, at(2500), []int{2500, 2600, 7499, 7500}, []bool{true, false, false, true}},
		{"a late flush keeps the grid", 5 * time.Second, at(2500), []int{3400, 7500, 7900}, []bool{true, true, false}},
		{"a stall skips the points missed", 5 * time.Second, at(2500), []int{2500, 19000, 22499, 22500}, []bool{true, true, false, true}},
		{"no interval: every flush", 0, at(2500), []int{0, 1, 1}, []bool{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSlot(tt.every, tt.first)
			for i, ms := range tt.flushes {
				got := s.Due(at(ms))
				if got != tt.want[i] {
					t.Fatalf("flush at %d ms: got Due %v; want %v", ms, got, tt.want[i])
				}
				if got {
					s.Done(at(ms))
				}
			}
		})
	}
}
