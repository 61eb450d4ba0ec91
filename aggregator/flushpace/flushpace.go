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
// Concurrency: a Pace is not safe for concurrent use; its aggregator's mutex guards it.
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
