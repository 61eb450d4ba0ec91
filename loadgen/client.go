package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// newClient is the one HTTP client of a run. Keep-alive connections are pooled generously so
// every concurrent request reuses a connection instead of paying a TCP handshake, which on this
// machine would be measured as server latency. No proxy (the load must reach the loopback
// address itself) and no redirects (a redirect could lead off this machine).
func newClient(timeout time.Duration, conns int) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// do sends one request and reads the whole response into buf (reset first), so the
// connection goes back to the pool. The body is read even for error statuses for the same
// reason.
func do(ctx context.Context, cl *http.Client, method, url string, body []byte, buf *bytes.Buffer) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, fmt.Errorf("build %s %s: %w", method, url, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-ndjson")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return resp.StatusCode, fmt.Errorf("read response of %s %s: %w", method, url, err)
	}
	return resp.StatusCode, nil
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

func (e *errorLog) status(ctx context.Context, what string, code int, body []byte) {
	if len(body) > 200 {
		body = body[:200]
	}
	e.add(ctx, what, fmt.Errorf("status %d: %s", code, bytes.TrimSpace(body)))
}

// wantOK records err, or a status other than 200 with its body, under what; it reports whether
// the request got its 200.
func (e *errorLog) wantOK(ctx context.Context, what string, code int, err error, body []byte) bool {
	switch {
	case err != nil:
		e.add(ctx, what, err)
		return false
	case code != http.StatusOK:
		e.status(ctx, what, code, body)
		return false
	}
	return true
}

func (e *errorLog) snapshot() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.count, append([]string(nil), e.samples...)
}
