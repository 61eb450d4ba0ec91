package topk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/schemas/migrate"
	"github.com/tallypipeline/tally/topk/tracker"
)

// Parts returns topk's lifecycle parts; e.Config is read when they start. OwnAdmin adds the admin
// HTTP server (the all-in-one serves one admin endpoint for everything instead).
func Parts(e cli.Env, s *Settings, admin lifecycle.Admin) []lifecycle.Part {
	cfg, runner, logger, reg, now := e.Config, e.Runner, e.Logger, e.Registry, e.Now
	logger = logger.With("component", "topk")
	var conn driver.Conn
	var rdb redis.UniversalClient
	var prod *kgo.Client
	var svc *Service
	parts := []lifecycle.Part{
		{
			Name: "topk clickhouse",
			Start: func(ctx context.Context) error {
				octx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				var err error
				if conn, err = chclient.Open(octx, cfg.ClickHouse.Options()); err != nil {
					return err
				}
				if _, err := migrate.ApplyTo(octx, conn, logger, migrate.Target{Cluster: cfg.ClickHouse.Cluster}); err != nil {
					conn.Close()
					return err
				}
				return nil
			},
			Stop: func(context.Context) error { return conn.Close() },
		},
		{
			Name: "topk redis",
			Start: func(context.Context) error {
				var err error
				rdb, err = redisclient.New(cfg.Redis.Options())
				return err
			},
			Stop: func(context.Context) error { return rdb.Close() },
		},
		{
			Name: "topk",
			Start: func(ctx context.Context) error {
				dial, err := cfg.Kafka.Security().Options()
				if err != nil {
					return err
				}
				opts := append(kafka.ClientOptions(cfg.Kafka.Brokers, "tally-topk-out", logger, nil), dial...)
				if prod, err = kgo.NewClient(append(opts, kafka.ProducerOptions(cfg.Kafka.Producer(100))...)...); err != nil {
					return fmt.Errorf("topk producer: %w", err)
				}
				if err := EnsureTopKTopic(ctx, prod, cfg.Kafka.Durability()); err != nil {
					prod.Close()
					return err
				}
				out := &Outputs{Redis: rdb, Kafka: prod, ClickHouse: conn, HistoryK: s.HistoryK}
				svc, err = New(ctx, Config{
					Brokers: cfg.Kafka.Brokers, Dial: dial, Partitions: cfg.Kafka.Partitions, Durability: cfg.Kafka.Durability(),
					PublishInterval: s.PublishInterval, SnapshotInterval: s.SnapshotInterval,
					SnapshotPath: filepath.Join(cfg.DataDir, "topk", "snapshot"),
					Tracker:      tracker.Options{Shards: s.Shards, Counters: s.DayCounters},
					ColdReplay:   s.ColdReplay,
				}, out, now, logger, reg)
				if err != nil {
					prod.Close()
					return err
				}
				runner.AddCheck("topk published", svc.Check)
				svc.Start()
				return nil
			},
			Stop: func(ctx context.Context) error {
				err := svc.Stop(ctx)
				prod.Close()
				if err != nil && !errors.Is(err, context.Canceled) {
					return err
				}
				return nil
			},
		},
	}
	if admin == lifecycle.OwnAdmin {
		mux := http.NewServeMux()
		lifecycle.AdminRoutes(mux, runner, reg, lifecycle.AdminOptions{Pprof: cfg.Debug.Pprof})
		admin, _ := lifecycle.HTTPServer("topk admin http", s.Addr, mux)
		parts = append(parts, admin)
	}
	return parts
}
