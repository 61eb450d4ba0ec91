package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tallypipeline/tally/client"
)

// VisReport is how long a view (or a click) took from its 202 to being visible through the read
// API.
type VisReport struct {
	Probes       int64    `json:"probes"`
	Visible      int64    `json:"visible"`
	NotVisible   int64    `json:"not_visible"` // not visible within the probe timeout
	Latency      Summary  `json:"latency"`     // 202 received to the first GET showing the view; visible probes only
	WarmupS      float64  `json:"warmup_s"`
	AfterWarmup  Summary  `json:"after_warmup"` // as Latency, for probes posted after the warm-up
	PollMs       float64  `json:"poll_ms"`      // the resolution of Latency
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
}

// prober posts one marker view for a new item every interval and polls that item's counts as
// an app would, through the collector's read API, which answers from the totals the aggregator
// keeps in Redis (ClickHouse while they are being rebuilt). The measured latency therefore
// includes the aggregator's flush and its Redis update, which is what an app sees. Each probe
// runs in its own goroutine; finish waits for them. Probes posted in the first warmup after
// start count in the whole run's figures only, as the open-loop requests of the warm-up do: they
// show how a fresh pipeline starts, the others how it keeps up.
type prober struct {
	api    *client.Client
	prefix string
	poll   time.Duration
	wait   time.Duration
	kind   probeKind
	start  time.Time
	warmup time.Duration

	wg                          sync.WaitGroup
	errs                        errorLog
	lat, steady                 recorder
	probes, visible, notVisible atomic.Int64
}

// run starts a probe every interval until stop ends; the probes themselves run under reqCtx
// so they can finish after the load stopped.
func (p *prober) run(stop, reqCtx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-stop.Done():
			return
		case <-tick.C:
		}
		id := fmt.Sprintf("%s-probe%06d", p.prefix, n)
		p.probes.Add(1)
		p.wg.Go(func() { p.probe(reqCtx, id) })
	}
}

// probeKind is what a probe posts and how it reads the count back.
type probeKind int

const (
	// viewProbe posts a view of a new item and reads GET /v1/items/{item}/counts.
	viewProbe probeKind = iota
	// clickProbe posts a click on a new ad and reads that ad's minute series
	// (GET /v1/ads/{ad}/clicks), summing the counts.
	clickProbe
	// counterProbe adds 1 to a new counter of the run's namespace and reads it back
	// (GET /v1/namespaces/{ns}/counters/{name}).
	counterProbe
)

// send posts one event for id; read returns the count a client reads back for it.
func (p *prober) send(ctx context.Context, id string) error {
	if p.kind == counterProbe {
		_, err := p.api.AddCount(ctx, counterNamespace(p.prefix), id, client.CounterAdd{Delta: 1, Token: id})
		return err
	}
	if p.kind == clickProbe {
		return p.api.SendClick(ctx, client.Click{ClickID: id, AdID: id, CampaignID: "probe", UserHash: "probe", IPHash: "probe", Device: "probe"})
	}
	return p.api.SendView(ctx, client.View{ItemID: id, ViewerID: "probe"})
}

func (p *prober) read(ctx context.Context, id string, posted time.Time) (int64, error) {
	if p.kind == viewProbe {
		c, err := p.api.ItemCounts(ctx, id)
		return c.Views, err
	}
	if p.kind == counterProbe {
		return p.api.GetCount(ctx, counterNamespace(p.prefix), id)
	}
	s, err := p.api.AdClicks(ctx, id, client.SeriesQuery{From: posted.Add(-time.Minute), To: posted.Add(time.Minute), Granularity: client.Minute})
	var n int64
	for _, pt := range s.Points {
		n += pt.Count
	}
	return n, err
}

func (p *prober) probe(ctx context.Context, id string) {
	posted := time.Now()
	if err := p.send(ctx, id); err != nil {
		p.errs.add(ctx, "probe POST", err)
		return
	}
	accepted := time.Now()
	deadline := accepted.Add(p.wait)
	for {
		n, err := p.read(ctx, id, posted)
		switch {
		case client.IsStatus(err, http.StatusServiceUnavailable):
			// Over capacity or not ready yet: the server asks to be asked again, and a client
			// would; the wait counts in the visibility, and one past the deadline as not visible.
		case err != nil:
			p.errs.add(ctx, "probe GET count", err)
			return
		case n == 1:
			d := time.Since(accepted)
			p.lat.add(d)
			if posted.Sub(p.start) >= p.warmup {
				p.steady.add(d)
			}
			p.visible.Add(1)
			return
		case n > 1:
			p.errs.add(ctx, "probe GET count", fmt.Errorf("%s shows %d; one was posted", id, n))
			return
		}
		if time.Now().After(deadline) {
			p.notVisible.Add(1)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.poll):
		}
	}
}

// finish waits for every probe and reports.
func (p *prober) finish() VisReport {
	p.wg.Wait()
	r := VisReport{
		Probes: p.probes.Load(), Visible: p.visible.Load(), NotVisible: p.notVisible.Load(),
		Latency: p.lat.summary(), PollMs: ms(p.poll),
		WarmupS: p.warmup.Seconds(), AfterWarmup: p.steady.summary(),
	}
	r.Errors, r.ErrorSamples = p.errs.snapshot()
	return r
}
