package loadgen

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tallypipeline/tally/client"
)

// newClient is the run's one API client (tally/client) with MaxAttempts 1: the generator
// measures each request, so a retry would hide what it measures. Its connections are pooled
// generously so every concurrent request reuses one instead of paying a TCP handshake, which on
// this machine would be measured as server latency.
func newClient(url, apiKey string, timeout time.Duration, conns int) (*client.Client, *http.Client, error) {
	hc := client.DefaultHTTPClient(timeout, conns)
	c, err := client.New(client.Options{BaseURL: url, APIKey: apiKey, HTTPClient: hc, MaxAttempts: 1})
	return c, hc, err
}

// maxErrorSamples bounds the error messages a report keeps; the counts stay exact.
const maxErrorSamples = 10

// errorLog counts unexpected outcomes of one stream and keeps the first few messages.
// Errors after the run was interrupted (ctx cancelled) are the interruption, not the server's,
// and are not counted.
type errorLog struct {
	mu      sync.Mutex
	count   int
	samples []string
}

func (e *errorLog) add(ctx context.Context, what string, err error) {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count++
	if len(e.samples) < maxErrorSamples {
		e.samples = append(e.samples, what+": "+err.Error())
	}
}

// ok records err, if any, under what and reports whether there was none.
func (e *errorLog) ok(ctx context.Context, what string, err error) bool {
	if err != nil {
		e.add(ctx, what, err)
		return false
	}
	return true
}

func (e *errorLog) snapshot() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.count, append([]string(nil), e.samples...)
}
