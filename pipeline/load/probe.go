package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// VisReport is how long a view (or a click) took from its 202 to being visible through the read
// API.
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
	kind   probeKind

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

// probeKind is what a probe posts and how it reads the count back.
type probeKind int

const (
	// viewProbe posts a view of a new item and reads GET /v1/items/{item}/counts.
	viewProbe probeKind = iota
	// clickProbe posts a click on a new ad and reads that ad's minute series
	// (GET /v1/ads/{ad}/clicks), summing the counts.
	clickProbe
)

// post returns the path and body that post one event for id.
func (k probeKind) post(id string) (string, []byte) {
	if k == clickProbe {
		return "/v1/clicks", []byte(`{"click_id":"` + id + `","ad_id":"` + id + `","campaign_id":"probe","user_hash":"probe","ip_hash":"probe","device":"probe"}`)
	}
	return "/v1/views", []byte(`{"item_id":"` + id + `","viewer_id":"probe"}`)
}

// readURL is where the count of id is read, posted at t.
func (k probeKind) readURL(base, id string, t time.Time) string {
	if k == clickProbe {
		from := t.Add(-time.Minute).UnixMilli()
		return fmt.Sprintf("%s/v1/ads/%s/clicks?granularity=minute&from=%d&to=%d", base, id, from, t.Add(time.Minute).UnixMilli())
	}
	return base + "/v1/items/" + id + "/counts"
}

// count reads the count of a read's answer: the item's views, or the sum of the series' counts.
func (k probeKind) count(body []byte) (int64, bool) {
	if k == viewProbe {
		return jsonInt(body, "views")
	}
	var s struct {
		Points []struct {
			Count int64 `json:"count"`
		} `json:"points"`
	}
	if json.Unmarshal(body, &s) != nil || len(s.Points) == 0 {
		return 0, false
	}
	var n int64
	for _, pt := range s.Points {
		n += pt.Count
	}
	return n, true
}

func (p *prober) probe(ctx context.Context, id string) {
	var buf bytes.Buffer
	path, body := p.kind.post(id)
	posted := time.Now()
	code, err := do(ctx, p.cl, http.MethodPost, p.url+path, body, &buf)
	switch {
	case err != nil:
		p.errs.add(ctx, "probe POST "+path, err)
		return
	case code != http.StatusAccepted:
		p.errs.status(ctx, "probe POST "+path, code, buf.Bytes())
		return
	}
	accepted := time.Now()
	deadline := accepted.Add(p.wait)
	readURL := p.kind.readURL(p.url, id, posted)
	for {
		code, err := do(ctx, p.cl, http.MethodGet, readURL, nil, &buf)
		switch {
		case err != nil:
			p.errs.add(ctx, "probe GET count", err)
			return
		case code != http.StatusOK:
			p.errs.status(ctx, "probe GET count", code, buf.Bytes())
			return
		}
		n, ok := p.kind.count(buf.Bytes())
		switch {
		case !ok:
			p.errs.status(ctx, "probe GET count without a count", code, buf.Bytes())
			return
		case n == 1:
			p.lat.add(time.Since(accepted))
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
	}
	r.Errors, r.ErrorSamples = p.errs.snapshot()
	return r
}
