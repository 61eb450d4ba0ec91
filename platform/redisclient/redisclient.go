// Package redisclient opens the go-redis client a process shares for all its Redis work, with
// options that turn a Redis that is down into a quick error (and a request into a quick 503)
// rather than a long wait. The client is safe for concurrent use; whoever opens it closes it.
package redisclient

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Open returns a client for the Redis at addr. It does not connect: a Redis that is down makes
// calls fail until it is back.
func Open(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		PoolSize:     64,
		// One retry: the commands sent are idempotent (cache writes, like applies by offset),
		// so one replayed after a lost reply is harmless, but a Redis that is down must turn
		// into a quick error.
		MaxRetries:         1,
		DialerRetries:      1,
		DialerRetryTimeout: 50 * time.Millisecond,
	})
}
