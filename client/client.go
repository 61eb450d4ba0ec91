package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Options configures a Client. Only BaseURL is required.
type Options struct {
	// BaseURL is the collector's address, e.g. http://127.0.0.1:8080.
	BaseURL string
	// APIKey is sent as X-API-Key when set (required when the collector has access control on).
	APIKey string
	// HTTPClient sends the requests; nil means a client with pooled keep-alive connections, no
	// redirects and a 30 s bound per attempt.
	HTTPClient *http.Client
	// MaxAttempts bounds the tries of one call (1: no retry). Default 5.
	MaxAttempts int
	// RetryBase is the first wait before jitter; each further failure doubles it up to RetryMax.
	// Defaults 100 ms and 5 s. A server's Retry-After lengthens a wait, never shortens it.
	RetryBase, RetryMax time.Duration
	// Now is the clock that stamps events without a time; nil is time.Now.
	Now func() time.Time
}

// Client calls one collector. Safe for concurrent use.
type Client struct {
	base   *url.URL
	opts   Options
	http   *http.Client
	now    func() time.Time
	idGen  func() string
	header http.Header
}

// New checks opts and returns a Client.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(opts.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host:port", opts.BaseURL)
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = 5
	}
	if opts.MaxAttempts < 0 {
		return nil, fmt.Errorf("client: max attempts %d: want at least 1", opts.MaxAttempts)
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = 100 * time.Millisecond
	}
	if opts.RetryMax < opts.RetryBase {
		opts.RetryMax = max(5*time.Second, opts.RetryBase)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = DefaultHTTPClient(30*time.Second, 16)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	h := http.Header{}
	if opts.APIKey != "" {
		h.Set("X-API-Key", opts.APIKey)
	}
	return &Client{base: u, opts: opts, http: hc, now: now, idGen: newID, header: h}, nil
}

// DefaultHTTPClient is an http.Client for one collector: conns keep-alive connections pooled so
// concurrent calls reuse them, no proxy (a collector is usually next door), no redirects (one
// could lead elsewhere with the key), and timeout per attempt.
func DefaultHTTPClient(timeout time.Duration, conns int) *http.Client {
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

// request is one API call: what to send and what a success is.
type request struct {
	method, path string // path: its segments escaped (url.PathEscape)
	query        url.Values
	body         []byte
	contentType  string
	header       http.Header
	want         int // the success status
	alsoWant     int // another success status, if any (201 beside 200)
	out          any // decoded from a success (and, for events, from a 400)
	decode400    bool
}

// call sends r, retrying what may succeed later, and decodes the answer into r.out.
func (c *Client) call(ctx context.Context, r request) error {
	b := &backoff.ExponentialBackOff{InitialInterval: c.opts.RetryBase, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: c.opts.RetryMax}
	b.Reset()
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, r)
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return errors.Join(err, ctx.Err())
		}
		if err == nil || attempt >= c.opts.MaxAttempts || ctx.Err() != nil || !retryable(err) {
			return err
		}
		wait := b.NextBackOff()
		var ae *APIError
		if errors.As(err, &ae) && ae.RetryAfter > wait {
			wait = ae.RetryAfter
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return err // the context would end before the next attempt could start
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// retryable reports whether the same request may succeed if sent again: the server said so
// (503, 429), or the answer never arrived (a timeout, a refused or broken connection).
func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Temporary()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)
}

func (c *Client) once(ctx context.Context, r request) error {
	// r.path holds escaped segments (an id may carry any byte): kept as they are in the
	// request line, unescaped in Path.
	u := *c.base
	u.RawPath = u.EscapedPath() + r.path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return fmt.Errorf("%s %s: build request: %w", r.method, r.path, err)
	}
	u.Path = p
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return fmt.Errorf("%s %s: build request: %w", r.method, r.path, err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	defer resp.Body.Close()
	// The whole body is read, so the connection goes back to the pool.
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", r.method, r.path, err)
	}
	if resp.StatusCode == r.want || r.alsoWant != 0 && resp.StatusCode == r.alsoWant {
		if r.out == nil {
			return nil
		}
		if err := json.Unmarshal(data, r.out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", r.method, r.path, err)
		}
		return nil
	}
	if resp.StatusCode == http.StatusBadRequest && r.decode400 && r.out != nil {
		_ = json.Unmarshal(data, r.out) // best effort: the per-line rejections
	}
	return apiError(r.method, r.path, resp, data)
}

func apiError(method, path string, resp *http.Response, data []byte) *APIError {
	e := &APIError{Method: method, Path: path, Status: resp.StatusCode}
	var body struct {
		Error string `json:"error"`
		Field string `json:"field"`
	}
	if json.Unmarshal(data, &body) == nil && body.Error != "" {
		e.Message, e.Field = body.Error, body.Field
	} else {
		e.Message = strings.TrimSpace(string(data[:min(len(data), 200)]))
	}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		} else if t, err := http.ParseTime(s); err == nil {
			e.RetryAfter = max(0, time.Until(t))
		}
	}
	return e
}
