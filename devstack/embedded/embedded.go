// Package embedded runs tally's infrastructure in-process for a laptop, a demo and the tests:
// the kfake Kafka broker, the chDB ClickHouse engine behind the ClickHouse HTTP interface, and a
// redis-server child. Each runs only where its address is not configured, under the data
// directory, and writes the address it got back into the config, so the parts started after it
// connect exactly as they would to real servers. One process at a time owns a data directory:
// the first part takes a lock on it (LockFile) and the last to stop releases it.
//
// This package links chDB (through chembed): only the all-in-one binary and tests import it.
package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/devstack/chembed"
	"github.com/tallypipeline/tally/devstack/kafkabroker"
	"github.com/tallypipeline/tally/devstack/redisproc"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/lifecycle"
)

// Parts returns the lifecycle parts that start what cfg leaves unconfigured, led by the lock
// on the data directory, so that nothing under it is touched by a second process. They must
// run before any part that reads the addresses from cfg. With everything configured there are
// none, and the data directory is neither used nor locked.
func Parts(cfg *config.Config, logger *slog.Logger, opts Options) []lifecycle.Part {
	var (
		parts []lifecycle.Part
		run   started
		keys  secrets
	)
	if len(cfg.Kafka.Brokers) == 0 {
		run.kafka = true
		var (
			k          *kafkabroker.Broker
			stopFaults func()
		)
		parts = append(parts, lifecycle.Part{
			Name: "embedded kafka",
			Start: func(context.Context) error {
				dir, err := subdir(cfg, "kafka")
				if err != nil {
					return err
				}
				if k, err = kafkabroker.Start(kafkabroker.Options{Dir: dir, Addr: opts.KafkaAddr, Brokers: opts.KafkaBrokers,
					SyncWrites: opts.KafkaSyncWrites, User: kafkaUser, Password: keys.kafka, Logger: logger, Registry: opts.Registry}); err != nil {
					return err
				}
				cfg.Kafka.Brokers = k.Addrs()
				cfg.Kafka.SASL = config.KafkaSASL{Mechanism: kafka.ScramSHA256, Username: kafkaUser, Password: keys.kafka}
				stopFaults = kafkaFaults(k, logger)
				return nil
			},
			Stop: func(context.Context) error { stopFaults(); k.Close(); return nil },
		})
	}
	if cfg.ClickHouse.Addr == "" {
		run.clickhouse = true
		var s *chembed.Server
		parts = append(parts, lifecycle.Part{
			Name: "embedded clickhouse",
			Start: func(context.Context) error {
				dir, err := subdir(cfg, "clickhouse")
				if err != nil {
					return err
				}
				if cfg.ClickHouse.Password == "" {
					cfg.ClickHouse.Password = keys.clickhouse
				}
				s, err = chembed.Start(chembed.Config{
					DataDir:     dir,
					Addr:        opts.ClickHouseAddr,
					Logger:      logger.With("part", "clickhouse"),
					Pipeline:    chembed.User{Name: cfg.ClickHouse.Username, Password: cfg.ClickHouse.Password},
					Readonly:    opts.Dashboards,
					Limits:      opts.Limits,
					CORSOrigins: opts.CORSOrigins,
					Registry:    opts.Registry,
				})
				if err != nil {
					return err
				}
				cfg.ClickHouse.Addr = s.Addr()
				return nil
			},
			Stop: func(ctx context.Context) error { return s.Close(ctx) },
		})
	}
	if cfg.Redis.Addr == "" {
		run.redis = true
		var p *redisproc.Proc
		parts = append(parts, lifecycle.Part{
			Name: "embedded redis",
			Start: func(ctx context.Context) error {
				dir, err := subdir(cfg, "redis")
				if err != nil {
					return err
				}
				if p, err = redisproc.Start(ctx, redisproc.Config{Dir: dir, Port: opts.RedisPort, MaxMemory: opts.RedisMaxMemory,
					Nice: opts.RedisNice, Password: keys.redis, Logger: logger}); err != nil {
					return err
				}
				cfg.Redis.Addr, cfg.Redis.Password = p.Addr(), keys.redis
				return nil
			},
			Stop: func(ctx context.Context) error { return p.Stop(ctx) },
		})
	}
	if len(parts) == 0 {
		return nil
	}
	var lock *dirLock
	first := []lifecycle.Part{{
		Name: "data directory lock",
		Start: func(context.Context) error {
			var err error
			if lock, err = lockDataDir(cfg.DataDir); err == nil {
				keys, err = loadSecrets(cfg.DataDir)
			}
			return err
		},
		Stop: func(context.Context) error { return lock.unlock() },
	}}
	return append(append(first, parts...), lifecycle.Part{
		Name: "infra env file",
		Start: func(context.Context) error {
			path, err := writeEnvFile(cfg, run)
			if err == nil {
				logger.Info("embedded servers' addresses and passwords written", "path", path)
			}
			return err
		},
	})
}

// kafkaUser is the embedded broker's one SASL user, which every tally client connects as.
const kafkaUser = "tally"

// started says which servers the embedded stack runs, so the env file names only those.
type started struct{ kafka, clickhouse, redis bool }

func subdir(cfg *config.Config, name string) (string, error) {
	dir := filepath.Join(cfg.DataDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create data directory %s: %w", dir, err)
	}
	return dir, nil
}

// Options say where the embedded servers listen and what bounds them (the all-in-one's
// embedded.* settings).
type Options struct {
	KafkaAddr       string // the first broker's listen address
	KafkaBrokers    int    // how many brokers; 0 means 1
	KafkaSyncWrites bool   // acknowledge a write once it is fsynced
	ClickHouseAddr  string // the engine's HTTP listen address
	Dashboards      chembed.User
	Limits          chembed.Limits // the dashboards user's
	CORSOrigins     []string
	RedisPort       int    // 0 picks a free one
	RedisMaxMemory  string // redis-server's maxmemory
	RedisNice       int    // redis-server's niceness
	// Registry, if set, receives the embedded engine's busy-time metrics and the embedded
	// broker's fsync rounds'.
	Registry prometheus.Registerer
}
