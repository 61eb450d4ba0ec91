package lease

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var rdb *redis.Client

func TestMain(m *testing.M) {
	os.Exit(testinfra.WithRedis(func(addr string) int {
		rdb = redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		return m.Run()
	}))
}

func TestLease(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const ttl = time.Minute
	tests := []struct {
		name string
		// check gets a lease just taken on key and fails the test if the lease misbehaves.
		check func(t *testing.T, ctx context.Context, key string, l *Lease)
	}{
		{"a second owner cannot take a held key", func(t *testing.T, ctx context.Context, key string, l *Lease) {
			if _, ok, err := Take(ctx, rdb, key, ttl); ok || err != nil {
				t.Fatalf("second take: got ok %v, err %v; want false, nil", ok, err)
			}
		}},
		{"renewing restores the full ttl", func(t *testing.T, ctx context.Context, key string, l *Lease) {
			if err := rdb.PExpire(ctx, key, time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			held, err := l.Renew(ctx)
			if !held || err != nil {
				t.Fatalf("renew: got %v, %v; want true, nil", held, err)
			}
			if left := rdb.PTTL(ctx, key).Val(); left < ttl-10*time.Second {
				t.Fatalf("ttl after renew: got %v; want about %v", left, ttl)
			}
		}},
		{"a deleted key is lost", func(t *testing.T, ctx context.Context, key string, l *Lease) {
			rdb.Del(ctx, key)
			if held, err := l.Renew(ctx); held || err != nil {
				t.Fatalf("renew after delete: got %v, %v; want false, nil", held, err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("renew of a lost lease recreated the key")
			}
		}},
		{"a key another owner took is lost and not released", func(t *testing.T, ctx context.Context, key string, l *Lease) {
			rdb.Del(ctx, key) // as if it had expired
			other, ok, err := Take(ctx, rdb, key, ttl)
			if !ok || err != nil {
				t.Fatalf("take after expiry: got %v, %v; want true, nil", ok, err)
			}
			if held, err := l.Renew(ctx); held || err != nil {
				t.Fatalf("renew of the old lease: got %v, %v; want false, nil", held, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if got := rdb.Get(ctx, key).Val(); got != other.Token() {
				t.Fatalf("key after the old owner's release: got %q; want the new owner's token %q", got, other.Token())
			}
		}},
		{"release frees the key for the next owner", func(t *testing.T, ctx context.Context, key string, l *Lease) {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := Take(ctx, rdb, key, ttl); !ok || err != nil {
				t.Fatalf("take after release: got %v, %v; want true, nil", ok, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			key := "lease-test:" + t.Name()
			rdb.Del(ctx, key) // left by an earlier run (go test -count)
			l, ok, err := Take(ctx, rdb, key, ttl)
			if !ok || err != nil {
				t.Fatalf("take: got %v, %v; want true, nil", ok, err)
			}
			if got := rdb.Get(ctx, key).Val(); got != l.Token() || l.Key() != key {
				t.Fatalf("key holds %q (lease key %q); want the token %q at %q", got, l.Key(), l.Token(), key)
			}
			tt.check(t, ctx, key, l)
		})
	}
}

func TestTakeWithRedisDown(t *testing.T) {
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	if _, ok, err := Take(context.Background(), down, "k", time.Second); ok || err == nil {
		t.Fatalf("take with redis down: got %v, %v; want false and an error", ok, err)
	}
}
