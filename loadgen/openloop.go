package loadgen

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tallypipeline/tally/client"
)

// openLoop fires requests on a fixed schedule (rate per second from start until end) whatever
// the responses do: a worker claims the next slot, sleeps until it is due and sends. Latency is
// measured from the slot's due time, so when the server (or this generator) falls behind, the
// wait before sending counts too. workers bounds the requests in flight.
type openLoop struct {
	rate    float64
	workers int
	kinds   []string // names of the request kinds fire reports, e.g. PUT and DELETE
	// warmup: requests due before start+warmup are left out of the after-warm-up figures, so
	// a cold cache at the start shows in Latency but does not stand for the steady state.
	warmup time.Duration
	// fire sends one request and returns the index of its kind and whether it succeeded (it
	// reports its own errors). rng belongs to the calling worker.
	fire func(ctx context.Context, rng *rand.Rand) (kind int, ok bool)
	errs errorLog // fire's errors

	fired, okCount, unavailable atomic.Int64
}

// result is fire's outcome of a request of kind what: true when it succeeded. A 503 is the
// server shedding load as documented (a read over its capacity; retry), so it is counted as
// refused, as the closed-loop streams count theirs, not as an error.
func (o *openLoop) result(ctx context.Context, what string, err error) bool {
	if client.IsStatus(err, http.StatusServiceUnavailable) {
		o.unavailable.Add(1)
		return false
	}
	return o.errs.ok(ctx, what, err)
}

// StreamReport is what one open-loop stream measured.
type StreamReport struct {
	TargetRate   float64            `json:"target_rate"`
	Requests     int64              `json:"requests"`
	Unsent       int64              `json:"unsent"` // slots still waiting when the run's grace ran out
	OK           int64              `json:"ok"`
	Status503    int64              `json:"status_503"` // refused for load: not OK, not an error
	AchievedRate float64            `json:"achieved_rate"`
	Latency      map[string]Summary `json:"latency"` // by kind, from the scheduled time to the full response
	WarmupS      float64            `json:"warmup_s"`
	AfterWarmup  map[string]Summary `json:"after_warmup"` // as Latency, for requests due after the warm-up
	StartDelay   Summary            `json:"start_delay"`
	Errors       int                `json:"errors"`
	ErrorSamples []string           `json:"error_samples,omitempty"`
}

// lateGrace is how long after end a stream that fell behind still sends overdue slots. Beyond
// it they are reported as unsent, so a stalled server cannot stretch the run without bound.
const lateGrace = 2 * time.Second

// run fires until end (or ctx ends) and waits for the requests in flight.
func (o *openLoop) run(ctx context.Context, start, end time.Time, seed uint64) StreamReport {
	p := newPacer(start, o.rate, slotsFor(o.rate, end.Sub(start)))
	lat := make([]recorder, len(o.kinds))
	steady := make([]recorder, len(o.kinds))
	steadyFrom := start.Add(o.warmup)
	var delay recorder
	var wg sync.WaitGroup
	for w := range o.workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			sl, err := newSleeper(p.rate)
			if err != nil {
				o.errs.add(ctx, "pace requests", err)
				return
			}
			defer sl.close()
			for {
				if time.Now().After(end.Add(lateGrace)) {
					return
				}
				due, ok := p.wait(ctx, sl)
				if !ok || !due.Before(end) {
					return
				}
				sent := time.Now()
				kind, ok := o.fire(ctx, rng)
				done := time.Now()
				if ctx.Err() != nil {
					return
				}
				o.fired.Add(1)
				if ok {
					o.okCount.Add(1)
				}
				lat[kind].add(done.Sub(due))
				if !due.Before(steadyFrom) {
					steady[kind].add(done.Sub(due))
				}
				delay.add(sent.Sub(due))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep := StreamReport{
		Unsent:     max(0, p.n-o.fired.Load()),
		TargetRate: o.rate, Requests: o.fired.Load(), OK: o.okCount.Load(), Status503: o.unavailable.Load(),
		AchievedRate: float64(o.fired.Load()) / elapsed.Seconds(),
		Latency:      map[string]Summary{}, StartDelay: delay.summary(),
		WarmupS: o.warmup.Seconds(), AfterWarmup: map[string]Summary{},
	}
	for i, k := range o.kinds {
		rep.Latency[k] = lat[i].summary()
		rep.AfterWarmup[k] = steady[i].summary()
	}
	rep.Errors, rep.ErrorSamples = o.errs.snapshot()
	return rep
}
