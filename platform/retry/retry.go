// Package retry runs an operation until it succeeds or its context ends, waiting with capped
// exponential backoff between attempts. It is how tally turns an outage of Kafka, ClickHouse or
// Redis into lag instead of loss: the caller keeps its place and tries again. Do blocks the
// calling goroutine and starts none.
package retry

import (
	"context"
	"errors"
	"time"
)

// First is the wait after the first failure; each further failure doubles it up to the cap.
const First = 100 * time.Millisecond

// Do calls fn until it returns nil or ctx ends. After each failure it calls onFail with the error
// and the coming wait (for logs and metrics; it may be nil), then waits. When ctx ends, Do
// returns the last error joined with ctx's.
func Do(ctx context.Context, maxWait time.Duration, fn func() error, onFail func(err error, wait time.Duration)) error {
	wait := First
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
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
		wait = min(wait*2, maxWait)
	}
}
