package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDo(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		failures  int
		maxWait   time.Duration
		timeout   time.Duration
		wantErr   error
		wantWaits []time.Duration
	}{
		{"first try", 0, time.Second, time.Second, nil, nil},
		{"backoff doubles up to the cap", 5, 250 * time.Millisecond, 5 * time.Second, nil,
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond}},
		{"context ends", 1000, time.Second, 250 * time.Millisecond, boom, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			calls := 0
			var waits []time.Duration
			err := Do(ctx, tt.maxWait, func() error {
				calls++
				if calls <= tt.failures {
					return boom
				}
				return nil
			}, func(_ error, w time.Duration) { waits = append(waits, w) })
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v; want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("got %v; want the context's error joined", err)
				}
				return
			}
			if calls != tt.failures+1 {
				t.Errorf("got %d calls; want %d", calls, tt.failures+1)
			}
			if len(waits) != len(tt.wantWaits) {
				t.Fatalf("got waits %v; want %v", waits, tt.wantWaits)
			}
			// Each wait is the doubling wait, capped, then randomized by ±Jitter; the cap
			// applies before the jitter.
			for i := range waits {
				lo, hi := time.Duration(float64(tt.wantWaits[i])*(1-Jitter)), time.Duration(float64(tt.wantWaits[i])*(1+Jitter))
				if waits[i] < lo || waits[i] > hi {
					t.Errorf("wait %d: got %s; want %s ± %.0f%%", i, waits[i], tt.wantWaits[i], Jitter*100)
				}
			}
		})
	}
}

// Processes that lost the same server must not retry in step: the waits at the cap differ.
func TestDoJitters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	calls := 0
	seen := map[time.Duration]bool{}
	_ = Do(ctx, time.Millisecond, func() error {
		calls++
		if calls > 30 {
			return nil
		}
		return errors.New("down")
	}, func(_ error, w time.Duration) { seen[w] = true })
	if len(seen) < 5 {
		t.Errorf("got %d distinct waits over 30 retries; want jittered waits", len(seen))
	}
}

// A Stop error ends the retries at once and comes back unwrapped.
func TestDoStops(t *testing.T) {
	boom := errors.New("boom")
	calls, waits := 0, 0
	err := Do(context.Background(), time.Second, func() error {
		calls++
		if calls == 3 {
			return Stop(boom)
		}
		return errors.New("again")
	}, func(error, time.Duration) { waits++ })
	if err != boom {
		t.Errorf("got %v; want %v, unwrapped", err, boom)
	}
	if calls != 3 || waits != 2 {
		t.Errorf("got %d calls and %d waits; want 3 and 2", calls, waits)
	}
}
