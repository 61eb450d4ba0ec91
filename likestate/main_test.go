package likestate

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The test binary shares one infrastructure; the like state's Redis keys are global
// (ReadyKey), so tests run one at a time, each from FLUSHALL.
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

func flushRedis(t testing.TB) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
}
