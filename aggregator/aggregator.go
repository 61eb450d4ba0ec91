// Package aggregator wires the aggregator component: the ClickHouse connection (with schema
// migrations applied at start), the counted-topic publisher both paths share (topk's input),
// the views and clicks consumers, the likes loader, and the admin HTTP server. On shutdown the
// consumers stop, write their last batches (and publish them) and commit before the publisher
// and the ClickHouse connection close.
package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"

	"tally/aggregator/aggregatorconf"
	"tally/aggregator/clicks"
	"tally/aggregator/counted"
	"tally/aggregator/likes"
	"tally/aggregator/views"
	"tally/platform/chclient"
	"tally/platform/cli"
	"tally/platform/config"
	"tally/platform/lifecycle"
	"tally/platform/redisclient"
	"tally/platform/totals"
	"tally/schemas"
	"tally/schemas/migrate"
)

// Parts returns the aggregator's lifecycle parts; e.Config is read when they start. OwnAdmin adds
// the admin HTTP server (the all-in-one serves one admin endpoint for everything instead).
func Parts(e cli.Env, s *aggregatorconf.Settings, admin lifecycle.Admin) []lifecycle.Part {
	cfg, runner, logger, reg, now := e.Config, e.Runner, e.Logger, e.Registry, e.Now
	var conn driver.Conn
	var rdb *redis.Client
	var src *views.Source
	// The counted topic (topk's input) takes both paths' batches; nil when not published.
	var pubTo counted.Topic
	parts := []lifecycle.Part{
		{
			Name: "aggregator clickhouse",
			Start: func(ctx context.Context) error {
				var err error
				if conn, err = OpenClickHouse(ctx, cfg, s, logger); err != nil {
					return err
				}
				runner.AddCheck("aggregator clickhouse", conn.Ping)
				return nil
			},
			Stop: func(context.Context) error { return conn.Close() },
		},
		{
			// The item totals the collector reads; a Redis that is down only delays them.
			Name: "aggregator redis",
			Start: func(context.Context) error {
				var err error
				rdb, err = redisclient.New(cfg.Redis.Options())
				return err
			},
			Stop: func(context.Context) error { return rdb.Close() },
		},
		{
			// Started before the consumers and stopped after them: their last flushes publish.
			Name: "counted publisher",
			Start: func(ctx context.Context) error {
				if !s.PublishCounted {
					return nil
				}
				dial, err := cfg.Kafka.Security().Options()
				if err != nil {
					return err
				}
				pub, err := counted.New(ctx, counted.Config{Brokers: cfg.Kafka.Brokers, Dial: dial, Partitions: cfg.Kafka.Partitions,
					Durability: cfg.Kafka.Durability(), ProduceTimeout: cfg.Kafka.ProduceTimeout}, logger, reg)
				if err != nil {
					return err
				}
				pubTo = pub
				return nil
			},
			Stop: func(context.Context) error {
				if pub, ok := pubTo.(*counted.Publisher); ok {
					pub.Close()
				}
				return nil
			},
		},
		{
			Name: "views consumer",
			Start: func(ctx context.Context) error {
				dial, err := cfg.Kafka.Security().Options()
				if err != nil {
					return err
				}
				agg := views.New(views.Config{
					Window:         s.DedupeWindow,
					Grace:          s.DedupeGrace,
					FlushInterval:  s.FlushInterval,
					SketchInterval: s.SketchInterval,
					FoldInterval:   s.FoldInterval,
					RollupInterval: s.SketchInterval,
					MaxBatch:       s.MaxBatch,
					SketchIdle:     time.Minute,
					DeltasTTL:      s.TTLSeconds,
					Owner:          owner(s.InstanceID),
					Totals:         totals.New(rdb, "views"),
					Counted:        pubTo,
				}, conn, now, logger, reg)
				group := views.Group{Brokers: cfg.Kafka.Brokers, Dial: dial, Name: s.Group,
					InstanceID: s.InstanceID, SessionTimeout: s.SessionTimeout}
				if src, err = views.NewSource(group, agg, s.FlushInterval, logger, reg); err != nil {
					return err
				}
				runner.AddCheck("aggregator kafka", src.Check)
				runner.AddCheck("aggregator progress", agg.Check)
				src.Start()
				go func() {
					<-src.Done()
					if err := src.Err(); err != nil && !errors.Is(err, context.Canceled) {
						runner.Fail(fmt.Errorf("views consumer: %w", err))
					}
				}()
				return nil
			},
			Stop: func(ctx context.Context) error { return src.Stop(ctx) },
		},
	}
	var clickSrc *clicks.Source
	parts = append(parts, lifecycle.Part{
		Name: "clicks consumer",
		Start: func(context.Context) error {
			agg := clicks.New(clicks.Config{
				Window:         s.Clicks.DedupeWindow,
				Grace:          s.Clicks.DedupeGrace,
				FraudThreshold: s.Clicks.FraudScoreThreshold,
				FlushInterval:  s.FlushInterval,
				RollupInterval: s.SketchInterval,
				MaxBatch:       s.MaxBatch,
				VerdictHold:    s.Clicks.CountedTTL,
				Owner:          owner(s.InstanceID),
				Counted:        pubTo,
			}, conn, now, logger, reg)
			dial, err := cfg.Kafka.Security().Options()
			if err != nil {
				return err
			}
			group := clicks.Group{Brokers: cfg.Kafka.Brokers, Dial: dial, Name: s.Clicks.Group,
				InstanceID: s.InstanceID, SessionTimeout: s.SessionTimeout}
			if clickSrc, err = clicks.NewSource(group, agg, s.FlushInterval, logger); err != nil {
				return err
			}
			runner.AddCheck("aggregator clicks kafka", clickSrc.Check)
			clickSrc.Start()
			go func() {
				<-clickSrc.Done()
				if err := clickSrc.Err(); err != nil && !errors.Is(err, context.Canceled) {
					runner.Fail(fmt.Errorf("clicks consumer: %w", err))
				}
			}()
			return nil
		},
		Stop: func(ctx context.Context) error { return clickSrc.Stop(ctx) },
	})
	var loader *likes.Loader
	parts = append(parts, lifecycle.Part{
		Name: "likes loader",
		Start: func(context.Context) error {
			dial, err := cfg.Kafka.Security().Options()
			if err != nil {
				return err
			}
			loader, err = likes.New(likes.Config{Brokers: cfg.Kafka.Brokers, Dial: dial, Topic: schemas.TopicLikes, Group: likes.DefaultGroup,
				FlushInterval: s.FlushInterval, MaxBatch: s.MaxBatch}, conn, logger, reg)
			if err != nil {
				return err
			}
			loader.Start()
			return nil
		},
		Stop: func(ctx context.Context) error { return loader.Stop(ctx) },
	})
	if admin == lifecycle.OwnAdmin {
		mux := http.NewServeMux()
		lifecycle.AdminRoutes(mux, runner, reg, lifecycle.AdminOptions{Pprof: cfg.Debug.Pprof})
		admin, _ := lifecycle.HTTPServer("aggregator admin http", s.Addr, mux)
		parts = append(parts, admin)
	}
	return parts
}

// OpenClickHouse connects to the configured ClickHouse, applies the migrations and sets the
// configured retention.
func OpenClickHouse(ctx context.Context, cfg *config.Config, s *aggregatorconf.Settings, logger *slog.Logger) (driver.Conn, error) {
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := chclient.Open(octx, cfg.ClickHouse.Options())
	if err != nil {
		return nil, err
	}
	v, err := migrate.ApplyTo(octx, conn, logger, migrate.Target{Cluster: cfg.ClickHouse.Cluster})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := setRetention(octx, conn, s); err != nil {
		conn.Close()
		return nil, err
	}
	logger.Info("clickhouse schema ready", "addr", cfg.ClickHouse.Addr, "database", cfg.ClickHouse.Database, "version", v)
	return conn, nil
}

// setRetention applies the configured TTLs. It changes table metadata only; existing parts are
// trimmed by later merges rather than rewritten now.
func setRetention(ctx context.Context, conn driver.Conn, c *aggregatorconf.Settings) error {
	days := func(d time.Duration) int { return int(d / (24 * time.Hour)) }
	for _, t := range []struct {
		table, column string
		days          int
	}{
		{"view_deltas", "second", days(c.TTLSeconds)},
		{"views_by_minute", "minute", days(c.TTLMinutes)},
		{"views_by_hour", "hour", days(c.TTLDays)},
		{"views_by_day", "day", days(c.TTLDays)},
		{"click_deltas", "minute", days(c.TTLMinutes)},
		{"clicks_by_hour", "hour", days(c.TTLDays)},
		{"clicks_counted", "toDateTime(ts)", days(c.Clicks.CountedTTL)},
		{"click_verdicts", "toDateTime(decided_at)", days(c.Clicks.CountedTTL)},
	} {
		q := fmt.Sprintf("ALTER TABLE %s MODIFY TTL %s + INTERVAL %d DAY SETTINGS materialize_ttl_after_modify = 0", t.table, t.column, t.days)
		if err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("set retention of %s: %w", t.table, err)
		}
	}
	return nil
}

// owner names this process in partition claims: the static member id when set, else host and pid.
func owner(instanceID string) string {
	if instanceID != "" {
		return instanceID
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
