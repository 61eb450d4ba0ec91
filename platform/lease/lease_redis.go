// Package lease lets one owner at a time hold a Redis key: the key holds the owner's random
// token and expires after a TTL unless the owner renews it, so an owner that dies frees it
// within one TTL and an owner that lost it (expiry, FLUSHALL, another owner) finds out at its
// next renewal. A Lease starts no goroutines and is used by one goroutine at a time; when to
// renew is the owner's choice (on a timer, or after each step of work so that a stuck owner
// loses the lease).
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewScript extends the key's TTL only while it holds the caller's token.
const renewScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`

// releaseScript deletes the key only while it holds the caller's token, so a late release
// never frees a lease another owner took after this one expired.
const releaseScript = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`

// Lease is one owner's hold on a key.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	token string
	ttl   time.Duration
}

// Take takes key for ttl under a new token. ok is false, with a nil Lease, when another owner
// holds it.
func Take(ctx context.Context, rdb redis.UniversalClient, key string, ttl time.Duration) (l *Lease, ok bool, err error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	l = &Lease{rdb: rdb, key: key, token: hex.EncodeToString(b), ttl: ttl}
	if ok, err = rdb.SetNX(ctx, key, l.token, ttl).Result(); err != nil {
		return nil, false, fmt.Errorf("take lease %s: %w", key, err)
	}
	if !ok {
		return nil, false, nil
	}
	return l, true, nil
}

// Renew extends the lease to a full TTL from now. false means it is lost: the key expired,
// was deleted, or holds another owner's token.
func (l *Lease) Renew(ctx context.Context) (bool, error) {
	n, err := redis.NewScript(renewScript).Run(ctx, l.rdb, []string{l.key}, l.token, l.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Release frees the key if it still holds this lease.
func (l *Lease) Release(ctx context.Context) error {
	if err := redis.NewScript(releaseScript).Run(ctx, l.rdb, []string{l.key}, l.token).Err(); err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// Key and Token let a script check the lease in the same atomic step as its own writes.
func (l *Lease) Key() string { return l.key }

// Token is the value the key holds while this lease has it.
func (l *Lease) Token() string { return l.token }
