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
		{"backoff doubles up to the cap", 4, 250 * time.Millisecond, 5 * time.Second, nil,
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond}},
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
			for i := range waits {
				if waits[i] != tt.wantWaits[i] {
					t.Errorf("wait %d: got %s; want %s", i, waits[i], tt.wantWaits[i])
				}
			}
		})
	}
}
