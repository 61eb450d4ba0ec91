// Package sink wires the sink component: the store its files go to (a local directory or an S3
// bucket), the consumer that writes the kept topics into hourly Parquet files (package archive)
// and deletes expired hours, and the admin HTTP server. On shutdown the consumer flushes and
// commits what it holds before leaving the group.
package sink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/sink/archive"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/sinkconf"
)

// Parts returns the sink's lifecycle parts; e.Config is read when they start. OwnAdmin adds the
// admin HTTP server (the all-in-one serves one admin endpoint for everything instead).
func Parts(e cli.Env, s *sinkconf.Settings, admin lifecycle.Admin) []lifecycle.Part {
	cfg, runner, logger, reg, now := e.Config, e.Runner, e.Logger, e.Registry, e.Now
	var a *archive.Archive
	parts := []lifecycle.Part{{
		Name: "sink consumer",
		Start: func(ctx context.Context) error {
			st, err := s.OpenStore(ctx, cfg, logger)
			if err != nil {
				return err
			}
			dial, err := cfg.Kafka.Security().Options()
			if err != nil {
				return err
			}
			a, err = archive.New(archive.Config{
				Brokers: cfg.Kafka.Brokers, Dial: dial, Group: s.Group, InstanceID: s.InstanceID,
				SessionTimeout: s.SessionTimeout, Topics: rawlog.Topics(), Rotation: s.Rotation,
				MaxBatchBytes: int64(s.MaxBatchBytes), Retention: Retention(s), RetentionEvery: 5 * time.Minute,
			}, st, now, logger, reg)
			if err != nil {
				return err
			}
			runner.AddCheck("sink kafka", a.Check)
			a.Start()
			go func() {
				<-a.Done()
				if err := a.Err(); err != nil && !errors.Is(err, context.Canceled) {
					runner.Fail(fmt.Errorf("sink consumer: %w", err))
				}
			}()
			logger.Info("sink writing", "store", st.String(), "rotation", s.Rotation)
			return nil
		},
		Stop: func(ctx context.Context) error { return a.Stop(ctx) },
	}}
	if admin == lifecycle.OwnAdmin {
		mux := http.NewServeMux()
		lifecycle.AdminRoutes(mux, runner, reg, lifecycle.AdminOptions{Pprof: cfg.Debug.Pprof})
		admin, _ := lifecycle.HTTPServer("sink admin http", s.Addr, mux)
		parts = append(parts, admin)
	}
	return parts
}

// Retention is each kept topic's retention: sink.retention, or its sink.retention_by_topic entry.
func Retention(s *sinkconf.Settings) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, t := range rawlog.Topics() {
		out[t.Name] = s.Retention
	}
	for topic, d := range s.RetentionOverrides() {
		out[topic] = d
	}
	return out
}
