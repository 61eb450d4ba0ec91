package redisproc

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestStartServesAndStops(t *testing.T) {
	tests := []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"absolute dir", func(t *testing.T) string { return t.TempDir() }},
		{"relative dir", func(t *testing.T) string { t.Chdir(t.TempDir()); return "data/redis" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkServesAndStops(t, tt.dir(t)) })
	}
}

func checkServesAndStops(t *testing.T, dir string) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := Start(ctx, Config{Dir: dir, MaxMemory: "64mb", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); got != "v" || err != nil {
		t.Errorf("got %q, %v; want \"v\", nil", got, err)
	}
	// The bound and the policy: state is never evicted.
	for k, want := range map[string]string{"maxmemory": "67108864", "maxmemory-policy": "noeviction", "hash-max-listpack-entries": hashListpackEntries} {
		if got := rdb.ConfigGet(ctx, k).Val()[k]; got != want {
			t.Errorf("config %s: got %q; want %q", k, got, want)
		}
	}
	rdb.Close()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	rdb = redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Error("got a ping answer after Stop; want the server gone")
	}
}
