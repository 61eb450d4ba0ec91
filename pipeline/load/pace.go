package load

import (
	"context"
	"runtime"
	"syscall"
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

// maxNap bounds one sleep of run, so that it notices ctx ending.
const maxNap = 10 * time.Millisecond

// run sends each slot's due time on slots once it is due, in order, then closes slots; the
// workers take them from there. A send waits while every worker is busy, and the slot keeps its
// due time, so the wait counts as latency. run stops early when ctx ends or, for a stream that
// fell behind, at giveUp; it returns how many slots it handed out.
//
// It sleeps on an OS thread of its own with nanosleep rather than on a Go timer: Go wakes an
// otherwise idle process for a timer only to the millisecond (its network poller waits in whole
// milliseconds), which would add up to a millisecond of the generator's own lateness to every
// request it measures.
func (p *pacer) run(ctx context.Context, giveUp time.Time, slots chan<- time.Time) (sent int64) {
	defer close(slots)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	late := time.NewTimer(time.Until(giveUp))
	defer late.Stop()
	for i := range p.n {
		due := p.at(i)
		for {
			d := time.Until(due)
			if d <= 0 || ctx.Err() != nil {
				break
			}
			ts := syscall.NsecToTimespec(int64(min(d, maxNap)))
			_ = syscall.Nanosleep(&ts, nil) // an interrupted sleep just loops
		}
		if ctx.Err() != nil || !time.Now().Before(giveUp) {
			return sent
		}
		select {
		case slots <- due:
			sent++
		case <-ctx.Done():
			return sent
		case <-late.C:
			return sent
		}
	}
	return sent
}
