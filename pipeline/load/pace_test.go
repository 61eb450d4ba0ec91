package load

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
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

// run hands out every slot once, in order, never before it is due, and stops early when ctx
// ends or when nobody took the slots by giveUp.
func TestPacerRun(t *testing.T) {
	const n = 300
	tests := []struct {
		name     string
		giveUp   time.Duration // after start
		cancelAt int64         // cancel ctx after receiving this many slots (0: never)
		readers  int
		want     int64 // slots handed out
	}{
		{"all slots to racing workers", time.Hour, 0, 8, n},
		{"ctx ends", time.Hour, 50, 1, 50},
		{"nobody takes the slots by giveUp", 30 * time.Millisecond, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := newPacer(time.Now(), 10000, n)
			slots := make(chan time.Time)
			var sent int64
			done := make(chan struct{})
			go func() { sent = p.run(ctx, p.start.Add(tt.giveUp), slots); close(done) }()
			var mu sync.Mutex
			var got []time.Time
			var wg sync.WaitGroup
			for range tt.readers {
				wg.Go(func() {
					for due := range slots {
						at := time.Now()
						mu.Lock()
						if at.Before(due) {
							t.Errorf("slot due %v handed out early, at %v", due, at)
						}
						got = append(got, due)
						if int64(len(got)) == tt.cancelAt {
							cancel()
						}
						mu.Unlock()
					}
				})
			}
			<-done
			wg.Wait()
			if sent != tt.want || int64(len(got)) != tt.want {
				t.Fatalf("got %d slots sent, %d received; want %d", sent, len(got), tt.want)
			}
			slices.SortFunc(got, func(a, b time.Time) int { return a.Compare(b) })
			for i, due := range got {
				if want := p.at(int64(i)); !due.Equal(want) {
					t.Fatalf("slot %d: got due %v; want %v (each slot once)", i, due, want)
				}
			}
			if _, open := <-slots; open {
				t.Fatal("slots still open after run returned")
			}
		})
	}
}
