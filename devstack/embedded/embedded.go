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

	"tally/devstack/chembed"
	"tally/devstack/kafkabroker"
	"tally/devstack/redisproc"
	"tally/platform/config"
	"tally/platform/lifecycle"
)

// Parts returns the lifecycle parts that start what cfg leaves unconfigured, led by the lock
// on the data directory, so that nothing under it is touched by a second process. They must
// run before any part that reads the addresses from cfg. With everything configured there are
// none, and the data directory is neither used nor locked.
func Parts(cfg *config.Config, logger *slog.Logger, opts Options) []lifecycle.Part {
	var parts []lifecycle.Part
	if len(cfg.Kafka.Brokers) == 0 {
		var k *kafkabroker.Broker
		parts = append(parts, lifecycle.Part{
			Name: "embedded kafka",
			Start: func(context.Context) error {
				dir, err := subdir(cfg, "kafka")
				if err != nil {
					return err
				}
				if k, err = kafkabroker.Start(kafkabroker.Options{Dir: dir, Addr: cfg.Kafka.EmbeddedAddr, SyncWrites: cfg.Kafka.SyncWrites}); err != nil {
					return err
				}
				cfg.Kafka.Brokers = []string{k.Addr()}
				return nil
			},
			Stop: func(context.Context) error { k.Close(); return nil },
		})
	}
	if cfg.ClickHouse.Addr == "" {
		var s *chembed.Server
		parts = append(parts, lifecycle.Part{
			Name: "embedded clickhouse",
			Start: func(context.Context) error {
				dir, err := subdir(cfg, "clickhouse")
				if err != nil {
					return err
				}
				ch := cfg.ClickHouse
				s, err = chembed.Start(chembed.Config{
					DataDir:  dir,
					Addr:     ch.EmbeddedAddr,
					Logger:   logger.With("part", "clickhouse"),
					Pipeline: chembed.User{Name: ch.Username, Password: ch.Password},
					Readonly: chembed.User{Name: ch.ReadonlyUser, Password: ch.ReadonlyPassword},
					Limits: chembed.Limits{
						MaxExecutionTime: ch.MaxExecutionTime,
						MaxResultRows:    uint64(ch.MaxResultRows),
						MaxResultBytes:   uint64(ch.MaxResultBytes),
					},
					CORSOrigins: ch.CORSOrigins,
					// The pipeline user reads the sink's local files with file() (docs/ARCHITECTURE.md).
					PipelineReadDirs: readDirs(opts.ReadDirs),
					Registry:         opts.Registry,
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
		var p *redisproc.Proc
		parts = append(parts, lifecycle.Part{
			Name: "embedded redis",
			Start: func(ctx context.Context) error {
				dir, err := subdir(cfg, "redis")
				if err != nil {
					return err
				}
				if p, err = redisproc.Start(ctx, redisproc.Config{Dir: dir, Port: cfg.Redis.EmbeddedPort, MaxMemory: cfg.Redis.EmbeddedMaxMemory, Nice: cfg.Redis.EmbeddedNice, Logger: logger}); err != nil {
					return err
				}
				cfg.Redis.Addr = p.Addr()
				// Standalone components on the same data directory find Redis here.
				if err := os.WriteFile(filepath.Join(cfg.DataDir, config.RedisAddrFile), []byte(p.Addr()+"\n"), 0o644); err != nil {
					return fmt.Errorf("record redis address: %w", err)
				}
				return nil
			},
			Stop: func(ctx context.Context) error { return p.Stop(ctx) },
		})
	}
	if len(parts) == 0 {
		return nil
	}
	var lock *dirLock
	return append([]lifecycle.Part{{
		Name: "data directory lock",
		Start: func(context.Context) error {
			var err error
			lock, err = lockDataDir(cfg.DataDir)
			return err
		},
		Stop: func(context.Context) error { return lock.unlock() },
	}}, parts...)
}

func subdir(cfg *config.Config, name string) (string, error) {
	dir := filepath.Join(cfg.DataDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create data directory %s: %w", dir, err)
	}
	return dir, nil
}

// Options are what the embedded stack needs to know of the components it runs beside.
type Options struct {
	// ReadDirs are local directories the embedded engine's pipeline user may read with file()
	// (the sink's files, when the sink writes locally).
	ReadDirs []string
	// Registry, if set, receives the embedded engine's busy-time metrics.
	Registry prometheus.Registerer
}

// readDirs makes dirs absolute, as the engine's guard compares them; one that cannot be is
// left out.
func readDirs(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if abs, err := filepath.Abs(d); err == nil {
			out = append(out, abs)
		}
	}
	return out
}
