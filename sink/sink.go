// Package sink wires the sink component: the store its files go to (a local directory or an S3
// bucket), the consumer that writes the kept topics into hourly Parquet files (package archive)
// and deletes expired hours, and the admin HTTP server. On shutdown the consumer flushes and
// commits what it holds before leaving the group.
package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"tally/platform/cli"
	"tally/platform/config"
	"tally/platform/lifecycle"
	"tally/sink/archive"
	"tally/sink/rawlog"
	"tally/sink/store"
)

// staleTemp is the age past which a temporary file is taken for the leftover of a crash.
const staleTemp = time.Hour

// Parts returns the sink's lifecycle parts; e.Config is read when they start. OwnAdmin adds the
// admin HTTP server (the all-in-one serves one admin endpoint for everything instead).
func Parts(e cli.Env, s *Settings, admin lifecycle.Admin) []lifecycle.Part {
	cfg, runner, logger, reg, now := e.Config, e.Runner, e.Logger, e.Registry, e.Now
	var a *archive.Archive
	parts := []lifecycle.Part{{
		Name: "sink consumer",
		Start: func(ctx context.Context) error {
			st, err := OpenStore(ctx, cfg, s, logger)
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
		lifecycle.AdminRoutes(mux, runner, reg, cfg.Debug.Pprof)
		admin, _ := lifecycle.HTTPServer("sink admin http", s.Addr, mux)
		parts = append(parts, admin)
	}
	return parts
}

// Retention is each kept topic's retention: sink.retention, or its sink.retention_by_topic entry.
func Retention(s *Settings) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, t := range rawlog.Topics() {
		out[t.Name] = s.Retention
	}
	for topic, d := range s.RetentionOverrides() {
		out[topic] = d
	}
	return out
}

// OpenStore opens the configured store and removes temporary files a crash left behind. The
// batch jobs open the same store to read the files.
func OpenStore(ctx context.Context, cfg *config.Config, s *Settings, logger *slog.Logger) (store.Store, error) {
	dir := s.DirIn(cfg)
	var st store.Store
	var err error
	var temps string
	switch s.Storage {
	case "s3":
		s3 := s.S3
		temps = filepath.Join(dir, "spool")
		st, err = store.NewS3(ctx, store.S3Options{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Prefix: s3.Prefix, Region: s3.Region,
			AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Secure: s3.Secure, SpoolDir: temps})
	default:
		temps = dir
		st, err = store.NewLocal(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open sink store: %w", err)
	}
	if n, err := store.RemoveStaleTemps(temps, time.Now().Add(-staleTemp)); err != nil {
		logger.Warn("remove stale temporary sink files", "dir", temps, "err", err)
	} else if n > 0 {
		logger.Info("removed temporary sink files left by a crash", "dir", temps, "files", n)
	}
	return st, nil
}
