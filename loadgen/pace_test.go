package loadgen

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestPacerSchedule(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		rate float64
		slot int64
		want time.Duration // after start
	}{
		{"slot 0 is due at start", 1000, 0, 0},
		{"1000/s: slot 1 at 1ms", 1000, 1, time.Millisecond},
		{"1000/s: slot 1500 at 1.5s", 1000, 1500, 1500 * time.Millisecond},
		{"0.5/s: slot 3 at 6s", 0.5, 3, 6 * time.Second},
		{"100k/s: slot 7 at 70us", 100000, 7, 70 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPacer(start, tt.rate, 1<<40)
			if got := p.at(tt.slot).Sub(start); got != tt.want {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestSlotsFor(t *testing.T) {
	tests := []struct {
		name string
		rate float64
		d    time.Duration
		want int64
	}{
		{"1000/s for 60s", 1000, time.Minute, 60000},
		{"100 batches/s for 3s", 100, 3 * time.Second, 300},
		{"slower than one per run still fires once", 0.1, time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slotsFor(tt.rate, tt.d); got != tt.want {
				t.Errorf("got %d; want %d", got, tt.want)
			}
		})
	}
}

// Every slot is claimed exactly once however many workers race for them, and claiming stops at n.
func TestPacerClaimConcurrent(t *testing.T) {
	const n = 10000
	p := newPacer(time.Now(), 1e6, n)
	seen := make([]int32, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i, due, ok := p.claim()
				if !ok {
					return
				}
				if want := p.at(i); !due.Equal(want) {
					t.Errorf("slot %d: got due %v; want %v", i, due, want)
				}
				mu.Lock()
				seen[i]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("slot %d claimed %d times; want 1", i, c)
		}
	}
	if _, _, ok := p.claim(); ok {
		t.Errorf("claim after %d slots: got ok; want exhausted", n)
	}
}

// A sleeper, precise (timerfd) or not, never wakes before the due time, whichever clock the
// wait ends on, and gives up when ctx ends.
func TestSleeperUntil(t *testing.T) {
	tests := []struct {
		name     string
		in       time.Duration // due time from now
		canceled bool
		want     bool
	}{
		{"due already", -time.Millisecond, false, true},
		{"within the timerfd's part", coarse / 2, false, true},
		{"past the Go timer's part", 5 * coarse, false, true},
		{"ctx ended", time.Hour, true, false},
	}
	for _, rate := range []float64{preciseUpTo, preciseUpTo + 1} {
		s, err := newSleeper(rate)
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		if precise := s.f != nil; precise != (rate <= preciseUpTo) {
			t.Fatalf("rate %v: got a precise sleeper %v; want %v", rate, precise, rate <= preciseUpTo)
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%v/s %s", rate, tt.name), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tt.canceled {
					cancel()
				}
				due := time.Now().Add(tt.in)
				got := s.until(ctx, due)
				if now := time.Now(); got && now.Before(due) {
					t.Fatalf("woke %v before the due time", due.Sub(now))
				}
				if got != tt.want {
					t.Fatalf("got %v; want %v", got, tt.want)
				}
			})
		}
	}
}
