package load

import (
	"context"
	"sync/atomic"
	"time"
)

// pacer spreads n slots evenly over time at rate slots per second from start: slot i is due at
// start + i/rate. Slot times come from the schedule, never from when the previous request
// finished, so a slow server shows up as latency measured from the due time instead of as a
// silently lower request rate (coordinated omission).
type pacer struct {
	start time.Time
	rate  float64 // slots per second
	n     int64   // slots in the whole run
	next  atomic.Int64
}

func newPacer(start time.Time, rate float64, n int64) *pacer {
	return &pacer{start: start, rate: rate, n: n}
}

// slotsFor is how many slots a run of d at rate per second holds (at least one).
func slotsFor(rate float64, d time.Duration) int64 {
	return max(1, int64(rate*d.Seconds()))
}

// at is when slot i is due.
func (p *pacer) at(i int64) time.Time {
	return p.start.Add(time.Duration(float64(i) / p.rate * float64(time.Second)))
}

// claim hands out the next slot and its due time; ok is false once every slot is taken. Safe
// for concurrent use: each slot goes to exactly one caller.
func (p *pacer) claim() (i int64, due time.Time, ok bool) {
	i = p.next.Add(1) - 1
	if i >= p.n {
		return i, time.Time{}, false
	}
	return i, p.at(i), true
}

// wait claims the next slot and sleeps until it is due, using timer (owned by the caller, one
// per goroutine, so nothing is allocated per slot). ok is false once every slot is taken or ctx
// ends.
func (p *pacer) wait(ctx context.Context, timer *time.Timer) (due time.Time, ok bool) {
	_, due, ok = p.claim()
	if !ok {
		return due, false
	}
	if d := time.Until(due); d > 0 {
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return due, false
		case <-timer.C:
		}
	}
	return due, true
}
