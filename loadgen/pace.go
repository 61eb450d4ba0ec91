package loadgen

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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

// wait claims the next slot and sleeps until it is due on s (owned by the caller, one per
// goroutine). ok is false once every slot is taken or ctx ends.
func (p *pacer) wait(ctx context.Context, s *sleeper) (due time.Time, ok bool) {
	_, due, ok = p.claim()
	if !ok {
		return due, false
	}
	return due, s.until(ctx, due)
}

// coarse is how far ahead of a due time a precise sleeper hands over from its Go timer to its
// timerfd.
const coarse = 2 * time.Millisecond

// preciseUpTo is the highest stream rate (requests per second) that sleeps precisely. A faster
// stream keeps the generator busy enough that Go checks its timers at every scheduling point
// and they fire on time (docs/PERFORMANCE.md, "The generator's own lateness and limits"), and the timerfd's
// two system calls per request would cost more CPU than they save.
const preciseUpTo = 2000

// sleeper sleeps until a due time. In an idle process Go wakes for a timer only to the
// millisecond (its poller waits in whole milliseconds: runtime/netpoll_epoll.go), which would
// add up to a millisecond of the generator's own lateness to every request it measures. A
// precise sleeper therefore wakes on its Go timer coarse early and sleeps the rest on a timerfd
// read through the poller, whose expiry the poller sees at once. One goroutine uses a sleeper
// at a time.
type sleeper struct {
	timer *time.Timer
	f     *os.File // the timerfd; nil for a sleeper on the Go timer alone
	fd    int      // f's descriptor, kept because f.Fd() would switch f to blocking reads
}

// newSleeper returns a sleeper for a stream of rate requests per second.
func newSleeper(rate float64) (*sleeper, error) {
	s := &sleeper{timer: time.NewTimer(time.Hour)}
	if rate > preciseUpTo {
		return s, nil
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		s.timer.Stop()
		return nil, fmt.Errorf("create timerfd: %w", err)
	}
	// A non-blocking fd makes a File whose reads wait in the poller, not in a blocked thread.
	s.f, s.fd = os.NewFile(uintptr(fd), "timerfd"), fd
	return s, nil
}

// until sleeps until due; false means ctx ended first (noticed until the Go timer fired).
func (s *sleeper) until(ctx context.Context, due time.Time) bool {
	target := due
	if s.f != nil {
		target = due.Add(-coarse)
	}
	if d := time.Until(target); d > 0 {
		s.timer.Reset(d)
		select {
		case <-ctx.Done():
			return false
		case <-s.timer.C:
		}
	}
	d := time.Until(due)
	if s.f == nil || d <= 0 {
		return ctx.Err() == nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(s.fd, 0, &spec, nil); err != nil {
		return false
	}
	var buf [8]byte
	_, err := s.f.Read(buf[:])
	return err == nil && ctx.Err() == nil
}

func (s *sleeper) close() {
	s.timer.Stop()
	if s.f != nil {
		s.f.Close()
	}
}
