// Package runlock lets one run of a nightly job at a time do its work: a Redis lease under the
// job's key, renewed in the background, whose loss ends the run's context. Each job has its own
// key, so the likes and clicks jobs do not wait for each other.
//
// Concurrency and lifecycle: Acquire starts one goroutine (the renewer); Release stops it and
// returns only once it has ended.
package runlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/platform/lease"
)

// ErrLocked means another run holds the lock (the error names the key).
var ErrLocked = errors.New("another run holds the lock")

// ErrLost is the cause that ends a run whose lock expired or was taken: another copy may be
// running now.
var ErrLost = errors.New("lost the run lock while running")

// Lock is a held run lock: a lease that a goroutine renews every third of its TTL until
// Release, so a crashed run frees it within one TTL.
type Lock struct {
	lease  *lease.Lease
	stop   context.CancelFunc      // stops the renewer
	endRun context.CancelCauseFunc // ends the run's context
	done   chan struct{}
}

// Acquire takes the lock at key or fails with ErrLocked. The returned context ends when ctx
// does or when the lock is lost (cause ErrLost); the run must stop then.
func Acquire(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration, logger *slog.Logger) (*Lock, context.Context, error) {
	held, ok, err := lease.Take(ctx, rdb, key, ttl)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w %s", ErrLocked, key)
	}
	runCtx, endRun := context.WithCancelCause(ctx)
	renewCtx, stop := context.WithCancel(context.Background())
	l := &Lock{lease: held, stop: stop, endRun: endRun, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
			}
			ok, err := held.Renew(renewCtx)
			switch {
			case err != nil && renewCtx.Err() == nil:
				logger.Warn("renew run lock; retrying", "key", key, "err", err)
			case err == nil && !ok:
				endRun(fmt.Errorf("%w %s", ErrLost, key))
				return
			}
		}
	}()
	return l, runCtx, nil
}

// Release stops renewing and deletes the lock if it is still ours.
func (l *Lock) Release(ctx context.Context) error {
	l.stop()
	<-l.done
	l.endRun(nil)
	return l.lease.Release(ctx)
}

// Hold runs fn under the lock at key: fn's context ends if the lock is lost, and then Hold
// returns the ErrLost cause rather than fn's error. The lock is released when fn returns.
func Hold(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration, logger *slog.Logger, fn func(context.Context) error) error {
	lock, runCtx, err := Acquire(ctx, rdb, key, ttl, logger)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lock.Release(rctx); err != nil {
			logger.Warn("release run lock; it expires by itself", "key", key, "err", err)
		}
	}()
	err = fn(runCtx)
	if cause := context.Cause(runCtx); errors.Is(cause, ErrLost) {
		return cause
	}
	return err
}
