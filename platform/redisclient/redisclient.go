// Package redisclient opens the go-redis client a process shares for all its Redis work, with
// options that turn a Redis that is down into a quick error (and a request into a quick 503)
// rather than a long wait. The client is safe for concurrent use; whoever opens it closes it.
package redisclient

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/platform/tlsconf"
)

// Options say where Redis is and how to authenticate to it and protect the link.
type Options struct {
	Addr     string
	Username string // ACL user; empty with a password: the default user (requirepass)
	Password string
	TLS      tlsconf.Files
}

// Open returns a client for the Redis at addr, without authentication or TLS (the embedded
// redis-server's). It does not connect: a Redis that is down makes calls fail until it is back.
func Open(addr string) *redis.Client {
	return redis.NewClient(clientOptions(Options{Addr: addr}, nil))
}

// New is Open with o's credentials and TLS; an error says what in o is wrong. A wrong password
// or an untrusted server shows up on the first call, not here.
func New(o Options) (*redis.Client, error) {
	if o.Username != "" && o.Password == "" {
		return nil, fmt.Errorf("redis %s: user %q needs a password", o.Addr, o.Username)
	}
	tc, err := o.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("redis %s TLS: %w", o.Addr, err)
	}
	return redis.NewClient(clientOptions(o, tc)), nil
}

func clientOptions(o Options, tc *tls.Config) *redis.Options {
	return &redis.Options{
		Addr:         o.Addr,
		Username:     o.Username,
		Password:     o.Password,
		TLSConfig:    tc,
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
	}
}
