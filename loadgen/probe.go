package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// VisReport is how long a view took from its 202 to being visible through the read API.
type VisReport struct {
	Probes       int64    `json:"probes"`
	Visible      int64    `json:"visible"`
	NotVisible   int64    `json:"not_visible"` // not visible within the probe timeout
	Latency      Summary  `json:"latency"`     // 202 received to the first GET showing the view; visible probes only
	PollMs       float64  `json:"poll_ms"`     // the resolution of Latency
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
}

// prober posts one marker view for a new item every interval and polls that item's counts as
// an app would, through the collector's read API, which answers from the totals the aggregator
// keeps in Redis (ClickHouse while they are being rebuilt). The measured latency therefore
// includes the aggregator's flush and its Redis update, which is what an app sees. Each probe
// runs in its own goroutine; finish waits for them.
type prober struct {
	cl     *http.Client
	url    string
	prefix string
	poll   time.Duration
	wait   time.Duration

	wg                          sync.WaitGroup
	errs                        errorLog
	lat                         recorder
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

func (p *prober) probe(ctx context.Context, item string) {
	var buf bytes.Buffer
	body := []byte(`{"item_id":"` + item + `","viewer_id":"probe"}`)
	code, err := do(ctx, p.cl, http.MethodPost, p.url+"/v1/views", body, &buf)
	switch {
	case err != nil:
		p.errs.add(ctx, "probe POST /v1/views", err)
		return
	case code != http.StatusAccepted:
		p.errs.status(ctx, "probe POST /v1/views", code, buf.Bytes())
		return
	}
	accepted := time.Now()
	deadline := accepted.Add(p.wait)
	countsURL := p.url + "/v1/items/" + item + "/counts"
	for {
		code, err := do(ctx, p.cl, http.MethodGet, countsURL, nil, &buf)
		switch {
		case err != nil:
			p.errs.add(ctx, "probe GET counts", err)
			return
		case code != http.StatusOK:
			p.errs.status(ctx, "probe GET counts", code, buf.Bytes())
			return
		}
		views, ok := jsonInt(buf.Bytes(), "views")
		switch {
		case !ok:
			p.errs.status(ctx, "probe GET counts without views", code, buf.Bytes())
			return
		case views == 1:
			p.lat.add(time.Since(accepted))
			p.visible.Add(1)
			return
		case views > 1:
			p.errs.add(ctx, "probe GET counts", fmt.Errorf("item %s shows %d views; one was posted", item, views))
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
	}
	r.Errors, r.ErrorSamples = p.errs.snapshot()
	return r
}
