// Package flushpace decides when an aggregator's consume loop flushes its batches: once the
// flush interval has passed since the last flush started, and the loop has consumed for at least
// half as long as that flush took.
//
// The second condition only bites when a flush takes longer than the interval (a busy engine, a
// machine short of CPU). Without it the next flush would start after a single poll, every flush
// would carry one poll's records, and its fixed cost (a dozen statements) would cap the rate
// below the input, so the lag would grow for good. With it the batches grow with the flush time
// and the fixed cost is spread over them; with quick flushes it changes nothing.
//
// A Slot says when a flush carries periodic work (sketch writes, rollups, checks) that costs more
// than a batch: once per interval, on a grid. Slots of one interval at different phases never
// share a flush, so no flush, and no batch consumed while it runs, waits for all of that work.
//
// Concurrency: a Pace or a Slot is not safe for concurrent use; its aggregator's mutex guards it.
package flushpace

import "time"

// Pace is one consume loop's flush schedule.
type Pace struct {
	interval time.Duration
	started  time.Time // the last flush's start
	ended    time.Time
	took     time.Duration
}

// New starts a schedule at now, as if a flush had just ended there in no time.
func New(interval time.Duration, now time.Time) *Pace {
	return &Pace{interval: interval, started: now, ended: now}
}

// Due reports whether a flush is due at now.
func (p *Pace) Due(now time.Time) bool {
	return now.Sub(p.started) >= p.interval && now.Sub(p.ended) >= p.took/2
}

// Start records that a flush starts at now and returns the time since the previous one started.
func (p *Pace) Start(now time.Time) time.Duration {
	since := now.Sub(p.started)
	p.started = now
	return since
}

// End records that the flush started last ended at now.
func (p *Pace) End(now time.Time) {
	p.ended = now
	p.took = now.Sub(p.started)
}

// Slot is periodic work carried by flushes: due once every interval, at the first flush at or
// after each point of a grid. The grid is fixed at creation, so a late flush does not shift the
// next point and two slots with different phases do not drift into one flush.
type Slot struct {
	every time.Duration
	next  time.Time
}

// NewSlot returns a slot due at first and then once per interval every; with every zero or less
// it is due at every flush.
func NewSlot(every time.Duration, first time.Time) *Slot {
	return &Slot{every: every, next: first}
}

// Due reports whether the slot's work is due at now.
func (s *Slot) Due(now time.Time) bool { return s.every <= 0 || !now.Before(s.next) }

// Done records that the work due at now was done: the slot is next due at the first grid point
// after now.
func (s *Slot) Done(now time.Time) {
	if s.every <= 0 || now.Before(s.next) {
		return
	}
	s.next = s.next.Add((now.Sub(s.next)/s.every + 1) * s.every)
}
