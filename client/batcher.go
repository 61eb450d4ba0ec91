package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// BatcherOptions bounds a Batcher's NDJSON bodies.
type BatcherOptions struct {
	// MaxEvents and MaxBytes bound one body (defaults 1,000 events and 1 MiB; the collector's
	// defaults allow 10,000 lines and 4 MiB). MaxDelay bounds how long an event waits for its
	// body to fill (default 200 ms).
	MaxEvents int
	MaxBytes  int
	MaxDelay  time.Duration
	// OnResult, when set, is called on the Batcher's goroutine with each body's outcome (after
	// its retries). Without it outcomes are only counted (Stats).
	OnResult func(BatchResult)
}

// BatchResult is the outcome of one body.
type BatchResult struct {
	Events   int
	Accepted Accepted
	Err      error
}

// BatcherStats counts outcomes so far.
type BatcherStats struct {
	Batches, Events, Accepted, Rejected, Failed int
}

// Batcher collects events into bodies and posts them in order on its own goroutine. Add blocks
// while a full body waits for the one being sent, so a slow collector slows the producer instead
// of growing memory.
type Batcher struct {
	c    *Client
	opts BatcherOptions

	mu     sync.Mutex
	buf    bytes.Buffer
	n      int
	first  time.Time // when the oldest event of buf was added
	closed bool
	stats  BatcherStats
	full   chan []byte // bodies handed to the sender, with their event counts in counts
	counts chan int
	timer  *time.Timer
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// NewBatcher starts a Batcher on c.
func (c *Client) NewBatcher(opts BatcherOptions) *Batcher {
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = 1000
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 1 << 20
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Batcher{c: c, opts: opts, full: make(chan []byte), counts: make(chan int, 1),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	b.timer = time.AfterFunc(time.Hour, b.onTimer)
	b.timer.Stop()
	go b.send()
	return b
}

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("client: batcher is closed")

// Add encodes e (fixing its id and time) into the current body, handing the body to the sender
// when it is full. It blocks while the previous full body waits; ctx bounds that wait.
func (b *Batcher) Add(ctx context.Context, e Event) error {
	line, err := e.prepare(b.c)
	if err != nil {
		return fmt.Errorf("batcher: encode event: %w", err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	if b.n > 0 && b.buf.Len()+len(line)+1 > b.opts.MaxBytes {
		body, n := b.take()
		b.mu.Unlock()
		if err := b.hand(ctx, body, n); err != nil {
			return err
		}
		b.mu.Lock()
	}
	if b.n == 0 {
		b.first = time.Now()
		b.timer.Reset(b.opts.MaxDelay)
	}
	b.buf.Write(line)
	b.buf.WriteByte('\n')
	b.n++
	if b.n < b.opts.MaxEvents {
		b.mu.Unlock()
		return nil
	}
	body, n := b.take()
	b.mu.Unlock()
	return b.hand(ctx, body, n)
}

// take removes the current body; b.mu is held.
func (b *Batcher) take() ([]byte, int) {
	b.timer.Stop()
	body := bytes.Clone(b.buf.Bytes())
	n := b.n
	b.buf.Reset()
	b.n = 0
	return body, n
}

func (b *Batcher) hand(ctx context.Context, body []byte, n int) error {
	select {
	case b.counts <- n:
	case <-ctx.Done():
		return fmt.Errorf("batcher: hand %d events to the sender: %w", n, ctx.Err())
	case <-b.done:
		return ErrClosed
	}
	b.full <- body // the sender takes the count first, then always the body
	return nil
}

func (b *Batcher) onTimer() {
	b.mu.Lock()
	if b.n == 0 || b.closed {
		b.mu.Unlock()
		return
	}
	body, n := b.take()
	b.mu.Unlock()
	_ = b.hand(b.ctx, body, n) // fails only once closing, when Close sends what is left
}

func (b *Batcher) send() {
	defer close(b.done)
	for {
		var n int
		select {
		case n = <-b.counts:
		case <-b.ctx.Done():
			return
		}
		body := <-b.full
		if n > 0 { // zero is Close's marker: everything handed before it is sent
			b.post(body, n)
		}
	}
}

func (b *Batcher) post(body []byte, n int) {
	res, err := b.c.PostEvents(b.ctx, body)
	b.mu.Lock()
	b.stats.Batches++
	b.stats.Events += n
	b.stats.Accepted += res.Accepted
	b.stats.Rejected += len(res.Rejected)
	if err != nil && res.Accepted == 0 && len(res.Rejected) == 0 {
		b.stats.Failed += n
	}
	b.mu.Unlock()
	if b.opts.OnResult != nil {
		b.opts.OnResult(BatchResult{Events: n, Accepted: res, Err: err})
	}
}

// Stats returns the outcome counts so far.
func (b *Batcher) Stats() BatcherStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Close sends what is left and stops the goroutine. ctx bounds the wait for bodies in flight;
// when it ends first, they are abandoned (their events may or may not be stored).
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	body, n := b.take()
	b.mu.Unlock()
	var err error
	if n > 0 {
		err = b.hand(ctx, body, n)
	}
	// Wait for the sender to be idle: it is between bodies once counts is empty and it holds
	// none. A zero-event marker through the same channels orders after everything handed.
	if err == nil {
		err = b.hand(ctx, nil, 0)
	}
	b.cancel()
	<-b.done
	return err
}
