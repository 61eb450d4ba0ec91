// Package demo is the all-in-one's built-in workload: a producer that posts views to the
// collector's public HTTP API at a steady rate through the Go client (tally/client), as a real
// producer would, so a fresh start shows data flowing end to end. It owns one goroutine between Start and Stop.
package demo

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/tallypipeline/tally/client"
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
	// One attempt per tick: a refused batch is dropped and logged, the next tick brings new
	// views, so a slow collector never makes the demo queue.
	c, err := client.New(client.Options{BaseURL: w.URL, MaxAttempts: 1, HTTPClient: client.DefaultHTTPClient(10*time.Second, 2)})
	if err != nil {
		w.Logger.Error("demo: client", "err", err)
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	perTick := max(1, w.Rate/10)
	events := make([]client.Event, perTick)
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for i := range events {
			item := 0
			if rng.IntN(2) == 1 {
				item = rng.IntN(w.Items)
			}
			events[i] = client.View{ItemID: fmt.Sprintf("item-%d", item), ViewerID: fmt.Sprintf("viewer-%d", rng.IntN(5000))}
		}
		if _, err := c.SendEvents(ctx, events); err != nil {
			if ctx.Err() == nil {
				w.Logger.Warn("demo: post events", "err", err)
			}
			continue
		}
		if sent += perTick; sent%(perTick*600) == 0 {
			w.Logger.Info("demo: views posted", "total", sent)
		}
	}
}
