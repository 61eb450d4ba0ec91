// Package collector wires the collector component: a Kafka producer and the HTTP API (ingest,
// /healthz, /readyz, /metrics). Parts start the producer before the listener and stop them in
// reverse: the listener stops taking requests and drains them, then the producer flushes
// what is buffered and closes.
package collector

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"tally/collector/ingest"
	"tally/platform/config"
	"tally/platform/kafka"
	"tally/platform/lifecycle"
	"tally/schemas"
)

// Parts returns the collector's lifecycle parts. cfg is read when the parts start, so embedded
// infrastructure started earlier can fill in its addresses. addr reports the bound listen
// address once started.
func Parts(cfg *config.Config, runner *lifecycle.Runner, logger *slog.Logger, reg *prometheus.Registry, now func() time.Time) (parts []lifecycle.Part, addr func() string) {
	var cl *kgo.Client
	mux := http.NewServeMux()
	producer := lifecycle.Part{
		Name: "collector kafka producer",
		Start: func(ctx context.Context) error {
			opts := append(kafka.ClientOptions(cfg.Kafka.Brokers, "tally-collector", logger, reg),
				kafka.ProducerOptions(cfg.Kafka.MaxBuffered, cfg.Kafka.ProduceTimeout)...)
			var err error
			if cl, err = kgo.NewClient(opts...); err != nil {
				return fmt.Errorf("create producer: %w", err)
			}
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := kafka.EnsureTopics(tctx, cl, int32(cfg.Kafka.Partitions), schemas.TopicViews, schemas.TopicLikes); err != nil {
				cl.Close()
				return err
			}
			ing := ingest.New(ingest.Config{
				MaxBodyBytes: int64(cfg.Collector.MaxBodyBytes),
				MaxLines:     cfg.Collector.MaxLines,
				Bounds:       schemas.TimeBounds{Future: cfg.Collector.FutureBound, Late: cfg.Collector.LateBound},
			}, cl, now, logger, reg)
			ing.Register(mux)
			lifecycle.AdminRoutes(mux, runner, reg)
			return nil
		},
		Stop: func(ctx context.Context) error {
			err := cl.Flush(ctx)
			cl.Close()
			if err != nil {
				return fmt.Errorf("flush producer: %w", err)
			}
			return nil
		},
	}
	server, addrFn := lifecycle.HTTPServer("collector http", cfg.Collector.Addr, mux)
	return []lifecycle.Part{producer, server}, addrFn
}
