package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tallypipeline/tally/client"
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
	// ViewsPerRecord is, for edge view counts, the views each accepted record carries.
	ViewsPerRecord int     `json:"views_per_record,omitempty"`
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

// eventStream says what a viewsRun posts: views, or clicks (the clicks scenario posts its
// NDJSON batches the same way, to the same endpoint, and watches its own topic and group).
type eventStream struct {
	name              string // "views" or "clicks", in messages
	rate, batch, conc int
	hot               float64 // the share of events on the one hot item (ad, counter)
	items, ids        int     // items besides the hot one; distinct viewer (user) ids
	newBatch          func(prefix string, n int) lineBatch
	topic, group      string // whose consumer lag is sampled
	metrics           string // prefix of the aggregator's metrics of this path
	probe             probeKind
	// send posts one batch body and returns how many of its events were accepted.
	send func(ctx context.Context, api *client.Client, body []byte) (int, error)
}

// postEvents sends NDJSON batches of n lines to POST /v1/events; a batch accepted in part is an
// error.
func postEvents(n int) func(ctx context.Context, api *client.Client, body []byte) (int, error) {
	return func(ctx context.Context, api *client.Client, body []byte) (int, error) {
		res, err := api.PostEvents(ctx, body)
		if err == nil && res.Accepted != n {
			err = fmt.Errorf("accepted %d of %d lines: %+v", res.Accepted, n, res.Rejected[:min(len(res.Rejected), 3)])
		}
		return res.Accepted, err
	}
}

// lineBatch is a poster's reusable NDJSON body, redrawn before each post.
type lineBatch interface {
	fill(rng *rand.Rand, hot float64, items, ids int)
	body() []byte
}

func (b *viewBatch) body() []byte { return b.buf }

func viewsStream(c Config) eventStream {
	return eventStream{name: "views", rate: c.Rate, batch: c.Batch, conc: c.Concurrency, hot: c.HotShare, items: c.Items, ids: c.Viewers,
		newBatch: func(prefix string, n int) lineBatch { return newViewBatch(prefix, n) },
		topic:    viewsTopic, group: c.Group, metrics: "tally_views_", probe: viewProbe, send: postEvents(c.Batch)}
}

// viewsRun posts NDJSON batches from Concurrency closed-loop posters paced to the target rate:
// batch i is due at start + i*batch/rate and a poster that is behind posts at once. A poster
// waits for its 202 before its next batch, so when the collector is slower than the target the
// achieved rate says so (and the lag monitor says whether the aggregator kept up).
type viewsRun struct {
	cfg    Config
	s      eventStream
	api    *client.Client
	web    *http.Client // the same connections, for /metrics
	prefix string
	errs   errorLog
	lag    *lagMonitor
	// before is the aggregator's counters read before the load's start: on a busy machine the
	// scrape can take seconds, which must not come out of the load's own time.
	before viewsMetrics

	requests, accepted, unavailable atomic.Int64
	lat                             recorder
}

func newViewsRun(ctx context.Context, c Config, s eventStream, api *client.Client, web *http.Client, prefix string) *viewsRun {
	return &viewsRun{cfg: c, s: s, api: api, web: web, prefix: prefix, lag: newLagMonitor(c.Brokers, c.KafkaSASL, s.group, s.topic),
		before: scrapeViewsMetrics(ctx, web, c.URL, s.metrics)}
}

func (v *viewsRun) post(ctx context.Context, start, end time.Time, seed uint64) {
	s := v.s
	rate := float64(s.rate) / float64(s.batch) // batches per second
	p := newPacer(start, rate, slotsFor(rate, end.Sub(start)))
	var wg sync.WaitGroup
	for w := range s.conc {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			batch := s.newBatch(v.prefix, s.batch)
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
				batch.fill(rng, s.hot, s.items, s.ids)
				t0 := time.Now()
				n, err := s.send(ctx, v.api, batch.body())
				if ctx.Err() != nil {
					return
				}
				v.lat.add(time.Since(t0))
				v.requests.Add(1)
				v.accepted.Add(int64(n))
				switch {
				case err == nil:
				case client.IsStatus(err, http.StatusServiceUnavailable):
					v.unavailable.Add(1)
				default:
					v.errs.add(ctx, s.name+" batch", err)
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
	probes := &prober{api: v.api, prefix: v.prefix, poll: c.ProbePoll, wait: c.ProbeWait, kind: v.s.probe,
		start: start, warmup: c.Warmup}
	before := v.before

	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(ctx)
	bg.Go(func() { lag.sample(bgCtx, start) })
	bg.Go(func() { probes.run(bgCtx, ctx, c.ProbeEvery) })

	v.post(ctx, start, end, seed)
	elapsed := time.Since(start)
	after := scrapeViewsMetrics(ctx, v.web, c.URL, v.s.metrics)
	stopBG()
	bg.Wait()
	// The lag drains while the last probes wait to become visible.
	var drained time.Duration
	var drainErr error
	bg.Go(func() { drained, drainErr = lag.drain(ctx, c.Drain) })
	probeRep := probes.finish()
	bg.Wait()

	rep := ViewsReport{
		TargetRate: v.s.rate, Batch: v.s.batch, Concurrency: v.s.conc, HotShare: v.s.hot,
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
