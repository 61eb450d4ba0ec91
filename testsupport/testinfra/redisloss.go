package testinfra

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RedisLoss is a go-redis hook that makes Redis lose its data (Lose) right after armed calls
// of the client it is added to, counting commands and pipelines from the arming on: a test
// empties Redis at random moments of a component's own Redis work, inside its scripts'
// sequences, not only between them. Safe for concurrent use.
type RedisLoss struct {
	Lose  func() // empties Redis; through another client, so that it is not counted
	calls atomic.Int64
	at    atomic.Pointer[[]int64]
	lost  atomic.Bool
}

// FlushAllWith returns a RedisLoss that runs FLUSHALL through rdb.
func FlushAllWith(rdb redis.UniversalClient) *RedisLoss {
	return &RedisLoss{Lose: func() { rdb.FlushAll(context.Background()) }}
}

// Arm loses the data after each of the calls at from now (none: never) and reports whether the
// data was lost since the last arming and how many calls were made since.
func (h *RedisLoss) Arm(at ...int64) (lost bool, calls int64) {
	h.at.Store(&at)
	return h.lost.Swap(false), h.calls.Swap(0)
}

func (h *RedisLoss) after() {
	n := h.calls.Add(1)
	if at := h.at.Load(); at != nil && slices.Contains(*at, n) {
		h.Lose()
		h.lost.Store(true)
	}
}

func (h *RedisLoss) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *RedisLoss) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after()
		return err
	}
}

func (h *RedisLoss) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after()
		return err
	}
}
