package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/platform/lease"
)

// LockKey is the Redis key that lets one run of batchjob likes at a time.
const LockKey = "batchjob:likes:lock"

// ErrLocked means another run holds the lock.
var ErrLocked = errors.New("another batchjob likes run holds the lock " + LockKey)

// errLockLost ends a run whose lock expired or was taken: another copy may be running now.
var errLockLost = errors.New("lost the lock " + LockKey + " while running")

// Lock is a held run lock: a lease that a goroutine renews every third of its TTL until
// Release, so a crashed run frees it within one TTL.
type Lock struct {
	lease  *lease.Lease
	stop   context.CancelFunc      // stops the renewer
	endRun context.CancelCauseFunc // ends the run's context
	done   chan struct{}
}

// Acquire takes the lock at key or fails with ErrLocked. The returned context ends when ctx
// does or when the lock is lost (cause errLockLost); the run must stop then.
func Acquire(ctx context.Context, rdb *redis.Client, key string, ttl time.Duration, logger *slog.Logger) (*Lock, context.Context, error) {
	held, ok, err := lease.Take(ctx, rdb, key, ttl)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, ErrLocked
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
				endRun(errLockLost)
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
