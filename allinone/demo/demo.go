// Package demo is the all-in-one's built-in workload: a producer that posts views to the
// collector's public HTTP API at a steady rate, as a real client would, so a fresh start shows
// data flowing end to end. It owns one goroutine between Start and Stop.
package demo

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"
)

// Workload posts Rate views per second over Items items (item-0 gets about half, like a viral
// item) from a pool of viewers, in NDJSON batches every 100 ms.
type Workload struct {
	URL    string // collector base URL
	Rate   int
	Items  int
	Logger *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
}

// Start begins posting.
func (w *Workload) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done = make(chan struct{})
	go w.run(ctx)
}

// Stop ends posting and waits for the request in flight.
func (w *Workload) Stop() {
	w.cancel()
	<-w.done
}

func (w *Workload) run(ctx context.Context) {
	defer close(w.done)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	client := &http.Client{Timeout: 10 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	perTick := max(1, w.Rate/10)
	var buf bytes.Buffer
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		buf.Reset()
		for range perTick {
			item := 0
			if rng.IntN(2) == 1 {
				item = rng.IntN(w.Items)
			}
			fmt.Fprintf(&buf, `{"type":"view","item_id":"item-%d","viewer_id":"viewer-%d"}`+"\n", item, rng.IntN(5000))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL+"/v1/events", &buf)
		if err != nil {
			w.Logger.Error("demo: build request", "err", err)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				w.Logger.Warn("demo: post events", "err", err)
			}
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			w.Logger.Warn("demo: post events", "status", resp.Status)
			continue
		}
		if sent += perTick; sent%(perTick*600) == 0 {
			w.Logger.Info("demo: views posted", "total", sent)
		}
	}
}
