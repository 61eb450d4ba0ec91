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
	"time"

	"tally/devstack/chembed"
	"tally/devstack/kafkabroker"
	"tally/devstack/redisproc"
)

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
	var w io.Writer = io.Discard
	if os.Getenv("TALLY_TEST_LOG") == "1" {
		w = os.Stderr
	}
	in := &Infra{Dir: dir, Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if in.Kafka, err = kafkabroker.Start(kafkabroker.Options{Dir: filepath.Join(dir, "kafka"), Addr: "127.0.0.1:0"}); err != nil {
		in.Stop()
		return nil, err
	}
	if in.ClickHouse, err = chembed.Start(chembed.Config{DataDir: filepath.Join(dir, "clickhouse"), Addr: "127.0.0.1:0", Logger: in.Logger}); err != nil {
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

// FreeAddr returns a loopback host:port nothing listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

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
