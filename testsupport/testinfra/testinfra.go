// Package testinfra starts the real infrastructure for integration tests: a kfake broker, the
// chDB engine behind the ClickHouse HTTP interface, and a redis-server child, all on free
// loopback ports under one temporary directory. chDB allows one engine per process, so a test
// binary starts one Infra in TestMain and isolates tests by database, topic or key prefix.
// Stop releases everything; the directory is removed.
package testinfra

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tallypipeline/tally/devstack/chembed"
	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/devstack/loopback"
	"github.com/tallypipeline/tally/devstack/redisproc"
)

// ClickHousePassword is the test engine's pipeline (administrator) user's password: the engine
// refuses an administrator without one.
const ClickHousePassword = "tally-test-admin"

// Infra is the running infrastructure.
type Infra struct {
	Dir        string
	Kafka      *kafkabroker.Broker
	ClickHouse *chembed.Server
	Redis      *redisproc.Proc
	Logger     *slog.Logger
}

// Start starts all three. Logs go to io.Discard unless TALLY_TEST_LOG=1.
func Start() (*Infra, error) {
	dir, err := os.MkdirTemp("", "tally-test-")
	if err != nil {
		return nil, fmt.Errorf("create test dir: %w", err)
	}
	in := &Infra{Dir: dir, Logger: logger()}
	if in.Kafka, err = kafkabroker.Start(kafkabroker.Options{Dir: filepath.Join(dir, "kafka"), Addr: "127.0.0.1:0"}); err != nil {
		in.Stop()
		return nil, err
	}
	if in.ClickHouse, err = chembed.Start(chembed.Config{DataDir: filepath.Join(dir, "clickhouse"), Addr: "127.0.0.1:0", Logger: in.Logger,
		Pipeline: chembed.User{Name: "default", Password: ClickHousePassword}}); err != nil {
		in.Stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if in.Redis, err = redisproc.Start(ctx, redisproc.Config{Dir: filepath.Join(dir, "redis"), Logger: in.Logger}); err != nil {
		in.Stop()
		return nil, err
	}
	return in, nil
}

// WithRedis starts a redis-server alone under a temporary directory, runs run with its address
// and stops it, returning run's result: the body of a TestMain whose package needs Redis and
// nothing else (no chDB engine, no broker). Use it as
// os.Exit(testinfra.WithRedis(func(addr string) int { ...; return m.Run() })).
func WithRedis(run func(addr string) int) int {
	dir, err := os.MkdirTemp("", "tally-redis-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create test dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := redisproc.Start(ctx, redisproc.Config{Dir: dir, Logger: logger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start redis:", err)
		return 1
	}
	defer p.Stop(context.Background())
	return run(p.Addr())
}

// logger is the infrastructure's logger: io.Discard unless TALLY_TEST_LOG=1.
func logger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("TALLY_TEST_LOG") == "1" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// MustFreeAddr is FreeAddr for a test, which it fails when no port is to be had.
func MustFreeAddr(t testing.TB) string {
	t.Helper()
	a, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// FreeAddr returns a loopback host:port nothing listens on now, below the kernel's ephemeral
// range (loopback.FreePort: a port inside it may be taken by any outgoing connection before the
// server the test starts binds it), and never one it returned before in this process, so that
// two servers of one test never collide.
func FreeAddr() (string, error) {
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	for range 1000 {
		port, err := loopback.FreePort()
		if err != nil {
			return "", err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr, nil
		}
	}
	return "", fmt.Errorf("no loopback port left that was not handed out before (%d so far)", len(handedOut.addrs))
}

// handedOut is what FreeAddr returned so far; test support only.
var handedOut = struct {
	mu    sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// Stop stops everything that started and removes the directory.
func (in *Infra) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if in.Redis != nil {
		_ = in.Redis.Stop(ctx)
	}
	if in.ClickHouse != nil {
		_ = in.ClickHouse.Close(ctx)
	}
	if in.Kafka != nil {
		in.Kafka.Close()
	}
	os.RemoveAll(in.Dir)
}
