package loadgen

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ViewsReport is what the views scenario measured.
type ViewsReport struct {
	TargetRate     int     `json:"target_rate"`
	Batch          int     `json:"batch"`
	Concurrency    int     `json:"concurrency"`
	HotShare       float64 `json:"hot_share"`
	Requests       int64   `json:"requests"`
	AcceptedEvents int64   `json:"accepted_events"`
	EventsPerSec   float64 `json:"events_per_sec"` // accepted (202) events per second of the run
	Status503      int64   `json:"status_503"`
	Latency        Summary `json:"latency"` // one POST /v1/events, send to full response
	// Aggregator counters scraped from the collector's /metrics at the start and end of the load
	// (present when the aggregator shares that endpoint, as in the all-in-one).
	ConsumedPerSec float64   `json:"consumed_per_sec,omitempty"`
	FlushMeanMs    float64   `json:"flush_mean_ms,omitempty"`
	Lag            LagReport `json:"lag"`
	Visibility     VisReport `json:"visibility"`
	Errors         int       `json:"errors"`
	ErrorSamples   []string  `json:"error_samples,omitempty"`
}

// viewsRun posts NDJSON batches from Concurrency closed-loop posters paced to the target rate:
// batch i is due at start + i*batch/rate and a poster that is behind posts at once. A poster
// waits for its 202 before its next batch, so when the collector is slower than the target the
// achieved rate says so (and the lag monitor says whether the aggregator kept up).
type viewsRun struct {
	cfg    Config
	cl     *http.Client
	prefix string
	errs   errorLog
	lag    *lagMonitor

	requests, accepted, unavailable atomic.Int64
	lat                             recorder
}

func newViewsRun(c Config, cl *http.Client, prefix string) *viewsRun {
	return &viewsRun{cfg: c, cl: cl, prefix: prefix, lag: newLagMonitor(c.Brokers, c.Group)}
}

func (v *viewsRun) post(ctx context.Context, start, end time.Time, seed uint64) {
	c := v.cfg
	rate := float64(c.Rate) / float64(c.Batch) // batches per second
	p := newPacer(start, rate, slotsFor(rate, end.Sub(start)))
	url := c.URL + "/v1/events"
	var wg sync.WaitGroup
	for w := range c.Concurrency {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			batch := newViewBatch(v.prefix, c.Batch)
			var buf bytes.Buffer
			sl, err := newSleeper(p.rate)
			if err != nil {
				v.errs.add(ctx, "pace requests", err)
				return
			}
			defer sl.close()
			for time.Now().Before(end) {
				if _, ok := p.wait(ctx, sl); !ok {
					return
				}
				batch.fill(rng, c.HotShare, c.Items, c.Viewers)
				t0 := time.Now()
				code, err := do(ctx, v.cl, http.MethodPost, url, batch.buf, &buf)
				if ctx.Err() != nil {
					return
				}
				v.lat.add(time.Since(t0))
				v.requests.Add(1)
				switch {
				case err != nil:
					v.errs.add(ctx, "POST /v1/events", err)
				case code == http.StatusAccepted:
					n, _ := jsonInt(buf.Bytes(), "accepted")
					v.accepted.Add(n)
					if n != int64(c.Batch) {
						v.errs.status(ctx, "POST /v1/events accepted fewer lines than sent", code, buf.Bytes())
					}
				case code == http.StatusServiceUnavailable:
					v.unavailable.Add(1)
				default:
					v.errs.status(ctx, "POST /v1/events", code, buf.Bytes())
				}
			}
		})
	}
	wg.Wait()
}

// run posts views until end, sampling consumer lag every second and probing visibility every
// ProbeEvery meanwhile; then it waits for the probes in flight and for the lag to drain.
// It closes the lag monitor's client when done.
func (v *viewsRun) run(ctx context.Context, start, end time.Time, seed uint64) ViewsReport {
	c := v.cfg
	lag := v.lag
	defer lag.close()
	probes := &prober{cl: v.cl, url: c.URL, prefix: v.prefix, poll: c.ProbePoll, wait: c.ProbeWait}
	before := scrapeViewsMetrics(ctx, v.cl, c.URL)

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(ctx)
	bg.Go(func() { lag.sample(bgCtx, start) })
	bg.Go(func() { probes.run(bgCtx, ctx, c.ProbeEvery) })

	v.post(ctx, start, end, seed)
	elapsed := time.Since(start)
	after := scrapeViewsMetrics(ctx, v.cl, c.URL)
	stopBG()
	bg.Wait()
	// The lag drains while the last probes wait to become visible.
	var drained time.Duration
	var drainErr error
	bg.Go(func() { drained, drainErr = lag.drain(ctx, c.Drain) })
	probeRep := probes.finish()
	bg.Wait()

	rep := ViewsReport{
		TargetRate: c.Rate, Batch: c.Batch, Concurrency: c.Concurrency, HotShare: c.HotShare,
		Requests: v.requests.Load(), AcceptedEvents: v.accepted.Load(), Status503: v.unavailable.Load(),
		EventsPerSec: float64(v.accepted.Load()) / elapsed.Seconds(),
		Latency:      v.lat.summary(),
		Lag:          lag.report(elapsed, c.Warmup, c.LagWindow, float64(v.accepted.Load())/elapsed.Seconds()),
		Visibility:   probeRep,
	}
	if before.ok && after.ok {
		rep.ConsumedPerSec = (after.records - before.records) / elapsed.Seconds()
		if n := after.flushCount - before.flushCount; n > 0 {
			rep.FlushMeanMs = (after.flushSum - before.flushSum) / n * 1000
		}
	}
	if c.Drain > 0 {
		rep.Lag.Drained = drainErr == nil
		rep.Lag.DrainSeconds = drained.Seconds()
		if drainErr != nil {
			rep.Lag.DrainError = drainErr.Error()
		}
	}
	rep.Errors, rep.ErrorSamples = v.errs.snapshot()
	return rep
}
