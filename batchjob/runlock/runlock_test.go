package runlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(testinfra.WithRedis(func(addr string) int { redisAddr = addr; return m.Run() }))
}

func client(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// A second Acquire of a held key fails with ErrLocked naming the key; Hold releases, so the
// next one succeeds.
func TestSecondAcquireIsLocked(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := client(t)
	const key = "test:runlock:second"
	err := Hold(ctx, rdb, key, time.Second, slog.New(slog.DiscardHandler), func(context.Context) error {
		_, _, err := Acquire(ctx, rdb, key, time.Second, slog.New(slog.DiscardHandler))
		if !errors.Is(err, ErrLocked) || err.Error() != "another run holds the lock "+key {
			return fmt.Errorf("second acquire: got %v; want ErrLocked naming %s", err, key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	lock, _, err := Acquire(ctx, rdb, key, time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("acquire after Hold returned: got %v; want the lock", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A run whose lock is taken from it (expired while the process stalled, or Redis emptied) has
// its context ended with ErrLost, Hold returns that cause, and the release leaves the new
// holder's lock alone.
func TestLockLostEndsRun(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := client(t)
	const key = "test:runlock:lost"
	err := Hold(ctx, rdb, key, 300*time.Millisecond, slog.New(slog.DiscardHandler), func(runCtx context.Context) error {
		if err := rdb.Set(ctx, key, "another run", time.Minute).Err(); err != nil {
			return err
		}
		select {
		case <-runCtx.Done():
			return runCtx.Err()
		case <-ctx.Done():
			return errors.New("run context still alive after its lock was taken")
		}
	})
	if !errors.Is(err, ErrLost) {
		t.Fatalf("Hold: got %v; want ErrLost", err)
	}
	if got := rdb.Get(ctx, key).Val(); got != "another run" {
		t.Fatalf("lock after the old run's release: got %q; want the other run's %q", got, "another run")
	}
}
