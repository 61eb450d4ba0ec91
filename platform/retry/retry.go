// Package retry runs an operation until it succeeds or its context ends, waiting with capped,
// jittered exponential backoff between attempts. It is how tally turns an outage of Kafka,
// ClickHouse or Redis into lag instead of loss: the caller keeps its place and tries again. The
// jitter (±Jitter of each wait) keeps the processes that lost the same server from retrying in
// step when it returns. Do blocks the calling goroutine and starts none.
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

const (
	// First is the wait after the first failure before jitter; each further failure doubles it
	// up to the cap.
	First = 100 * time.Millisecond
	// Jitter is the share by which each wait is randomized either way.
	Jitter = 0.5
)

// Do calls fn until it returns nil, returns an error wrapped by Stop, or ctx ends. After each
// failure it calls onFail with the error and the coming wait (for logs and metrics; it may be
// nil), then waits. A Stop error is returned unwrapped, at once. When ctx ends, Do returns the
// last error joined with ctx's.
func Do(ctx context.Context, maxWait time.Duration, fn func() error, onFail func(err error, wait time.Duration)) error {
	b := &backoff.ExponentialBackOff{InitialInterval: First, RandomizationFactor: Jitter, Multiplier: 2, MaxInterval: maxWait}
	b.Reset()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if s, ok := errors.AsType[*stop](err); ok {
			return s.err
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		wait := b.NextBackOff()
		if onFail != nil {
			onFail(err, wait)
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

// Stop wraps err so that Do returns err at once instead of retrying: for a caller that bounds
// its attempts, or sees that trying again cannot help.
func Stop(err error) error { return &stop{err} }

type stop struct{ err error }

func (s *stop) Error() string { return s.err.Error() }
func (s *stop) Unwrap() error { return s.err }
