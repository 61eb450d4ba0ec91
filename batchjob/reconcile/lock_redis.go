package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// LockKey is the Redis key that lets one run of batchjob likes at a time.
const LockKey = "batchjob:likes:lock"

// ErrLocked means another run holds the lock.
var ErrLocked = errors.New("another batchjob likes run holds the lock " + LockKey)

// errLockLost ends a run whose lock expired or was taken: another copy may be running now.
var errLockLost = errors.New("lost the lock " + LockKey + " while running")

// refreshScript extends the lock's TTL only if it still holds our token.
const refreshScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`

// releaseScript deletes the lock only if it still holds our token.
const releaseScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`

// Lock is a held run lock: a Redis key with a random token and a TTL that a goroutine refreshes
// every third of the TTL until Release, so a crashed run frees it within one TTL.
type Lock struct {
	rdb    *redis.Client
	key    string
	token  string
	stop   context.CancelFunc      // stops the refresher
	endRun context.CancelCauseFunc // ends the run's context
	done   chan struct{}
}

// Acquire takes the lock at key or fails with ErrLocked. The returned context ends when ctx
// does or when the lock is lost (cause errLockLost); the run must stop then.
func Acquire(ctx context.Context, rdb *redis.Client, key string, ttl time.Duration, logger *slog.Logger) (*Lock, context.Context, error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	l := &Lock{rdb: rdb, key: key, token: hex.EncodeToString(b), done: make(chan struct{})}
	ok, err := rdb.SetNX(ctx, key, l.token, ttl).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("take lock %s: %w", key, err)
	}
	if !ok {
		return nil, nil, ErrLocked
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	refreshCtx, stop := context.WithCancel(context.Background())
	l.stop, l.endRun = stop, cancel
	refresh := redis.NewScript(refreshScript)
	go func() {
		defer close(l.done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-refreshCtx.Done():
				return
			case <-t.C:
			}
			n, err := refresh.Run(refreshCtx, rdb, []string{key}, l.token, ttl.Milliseconds()).Int()
			switch {
			case err != nil && refreshCtx.Err() == nil:
				logger.Warn("refresh run lock; retrying", "key", key, "err", err)
			case err == nil && n == 0:
				cancel(errLockLost)
				return
			}
		}
	}()
	return l, runCtx, nil
}

// Release stops refreshing and deletes the lock if it is still ours.
func (l *Lock) Release(ctx context.Context) error {
	l.stop()
	<-l.done
	l.endRun(nil)
	if err := redis.NewScript(releaseScript).Run(ctx, l.rdb, []string{l.key}, l.token).Err(); err != nil {
		return fmt.Errorf("release lock %s: %w", l.key, err)
	}
	return nil
}
