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
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/aggregator/aggregatorconf"
	"github.com/tallypipeline/tally/aggregator/clicks"
	"github.com/tallypipeline/tally/aggregator/counted"
	"github.com/tallypipeline/tally/aggregator/counters"
	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/aggregator/likes"
	"github.com/tallypipeline/tally/aggregator/member"
	"github.com/tallypipeline/tally/aggregator/views"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/platform/totals"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/migrate"
)

// Parts returns the aggregator's lifecycle parts; e.Config is read when they start. OwnAdmin adds
// the admin HTTP server (the all-in-one serves one admin endpoint for everything instead).
func Parts(e cli.Env, s *aggregatorconf.Settings, admin lifecycle.Admin) []lifecycle.Part {
	w := &wiring{e: e, s: s}
	// The streams stop first (parts stop in reverse), so their partitions move on at once: the
	// likes loader's stop may wait for a rebalance of its own group in progress.
	parts := []lifecycle.Part{w.clickhouse(), w.redis(), w.publisher(), w.likes(), w.views(), w.clicks(), w.counters()}
	if admin == lifecycle.OwnAdmin {
		mux := http.NewServeMux()
		lifecycle.AdminRoutes(mux, e.Runner, e.Registry, lifecycle.AdminOptions{Pprof: e.Config.Debug.Pprof})
		admin, _ := lifecycle.HTTPServer("aggregator admin http", s.Addr, mux)
		parts = append(parts, admin)
	}
	return parts
}

// wiring holds what the parts share once started: each part sets its field in Start, and the
// parts after it read it then.
type wiring struct {
	e    cli.Env
	s    *aggregatorconf.Settings
	conn driver.Conn
	rdb  redis.UniversalClient
	// pubTo is the counted topic (topk's input), which takes both streams' batches; nil when
	// not published.
	pubTo counted.Topic
}

func (w *wiring) clickhouse() lifecycle.Part {
	return lifecycle.Part{
		Name: "aggregator clickhouse",
		Start: func(ctx context.Context) error {
			var err error
			if w.conn, err = OpenClickHouse(ctx, w.e.Config, w.s, w.e.Logger); err != nil {
				return err
			}
			w.e.Runner.AddCheck("aggregator clickhouse", w.conn.Ping)
			return nil
		},
		Stop: func(context.Context) error { return w.conn.Close() },
	}
}

// redis holds the item totals the collector reads; a Redis that is down only delays them.
func (w *wiring) redis() lifecycle.Part {
	return lifecycle.Part{
		Name: "aggregator redis",
		Start: func(context.Context) error {
			var err error
			w.rdb, err = redisclient.New(w.e.Config.Redis.Options())
			return err
		},
		Stop: func(context.Context) error { return w.rdb.Close() },
	}
}

// publisher is started before the consumers and stopped after them: their last flushes publish.
func (w *wiring) publisher() lifecycle.Part {
	return lifecycle.Part{
		Name: "counted publisher",
		Start: func(ctx context.Context) error {
			if !w.s.PublishCounted {
				return nil
			}
			cfg := w.e.Config
			dial, err := cfg.Kafka.Security().Options()
			if err != nil {
				return err
			}
			pub, err := counted.New(ctx, counted.Config{Brokers: cfg.Kafka.Brokers, Dial: dial, Partitions: cfg.Kafka.Partitions,
				Durability: cfg.Kafka.Durability(), Producer: cfg.Kafka.Producer(10000), Encoding: cfg.Kafka.Encoding()}, w.e.Logger, w.e.Registry)
			if err != nil {
				return err
			}
			w.pubTo = pub
			return nil
		},
		Stop: func(context.Context) error {
			if pub, ok := w.pubTo.(*counted.Publisher); ok {
				pub.Close()
			}
			return nil
		},
	}
}

func (w *wiring) views() lifecycle.Part {
	s := w.s
	return w.consumer("views consumer", "aggregator kafka", func(g member.Group) (*member.Source, error) {
		agg := views.New(views.Config{
			Window:         s.Views.DedupeWindow,
			Grace:          s.Views.DedupeGrace,
			FlushInterval:  s.FlushInterval,
			SketchInterval: s.SketchInterval,
			FoldInterval:   s.FoldInterval,
			RollupInterval: s.SketchInterval,
			MaxBatch:       s.MaxBatch,
			SketchIdle:     time.Minute,
			DeltasTTL:      s.TTLSeconds,
			Owner:          owner(s.InstanceID),
			ClaimWorkers:   w.claimWorkers(),
			Totals:         totals.New(w.rdb, "views"),
			Counted:        w.pubTo,
		}, w.conn, w.e.Now, w.e.Logger, w.e.Registry)
		w.e.Runner.AddCheck("aggregator progress", agg.Check)
		g.Name, g.InstanceID = s.Group, s.InstanceID
		c := w.member(g)
		c.KafkaMetrics = true // one client's are enough: both have the same brokers
		return views.NewSource(c, agg)
	})
}

func (w *wiring) clicks() lifecycle.Part {
	s := w.s
	return w.consumer("clicks consumer", "aggregator clicks kafka", func(g member.Group) (*member.Source, error) {
		agg := clicks.New(clicks.Config{
			Window:         s.Clicks.DedupeWindow,
			Grace:          s.Clicks.DedupeGrace,
			FraudThreshold: s.Clicks.FraudScoreThreshold,
			FlushInterval:  s.FlushInterval,
			RollupInterval: s.SketchInterval,
			MaxBatch:       s.MaxBatch,
			VerdictHold:    s.Clicks.CountedTTL,
			Owner:          owner(s.InstanceID),
			ClaimWorkers:   w.claimWorkers(),
			Counted:        w.pubTo,
		}, w.conn, w.e.Now, w.e.Logger, w.e.Registry)
		w.e.Runner.AddCheck("aggregator clicks progress", agg.Check)
		g.Name = s.Clicks.Group
		if s.InstanceID != "" {
			g.InstanceID = s.InstanceID + "-clicks" // a static member id is per group member
		}
		return clicks.NewSource(w.member(g), agg)
	})
}

// counters is the generic counters' eventual stream: its group and static member id are the
// views' with a suffix.
func (w *wiring) counters() lifecycle.Part {
	s := w.s
	return w.consumer("counters consumer", "aggregator counters kafka", func(g member.Group) (*member.Source, error) {
		agg := counters.New(counters.Config{FlushInterval: s.FlushInterval, MaxBatch: s.MaxBatch, CheckInterval: s.SketchInterval, Owner: owner(s.InstanceID),
			ClaimWorkers: w.claimWorkers()},
			w.conn, w.e.Now, w.e.Logger, w.e.Registry)
		w.e.Runner.AddCheck("aggregator counters progress", agg.Check)
		g.Name = s.Group + "-counters"
		if s.InstanceID != "" {
			g.InstanceID = s.InstanceID + "-counters"
		}
		return counters.NewSource(w.member(g), agg)
	})
}

// claimWorkers is how many partitions of an assignment a stream claims at once: one at a time
// with ClickHouse quorum inserts (engine.Config.ClaimWorkers), the engine's default otherwise.
func (w *wiring) claimWorkers() int {
	if w.e.Config.ClickHouse.Quorum {
		return 1
	}
	return 0
}

// consumer is a stream's part: newSource builds its engine and member, which starts and whose
// loop failing fails the process.
func (w *wiring) consumer(name, check string, newSource func(member.Group) (*member.Source, error)) lifecycle.Part {
	var src *member.Source
	return lifecycle.Part{
		Name: name,
		Start: func(context.Context) error {
			dial, err := w.e.Config.Kafka.Security().Options()
			if err != nil {
				return err
			}
			if src, err = newSource(member.Group{Brokers: w.e.Config.Kafka.Brokers, Dial: dial, SessionTimeout: w.s.SessionTimeout}); err != nil {
				return err
			}
			w.e.Runner.AddCheck(check, src.Check)
			src.Start()
			go func() {
				<-src.Done()
				if err := src.Err(); err != nil && !errors.Is(err, context.Canceled) {
					w.e.Runner.Fail(fmt.Errorf("%s: %w", name, err))
				}
			}()
			return nil
		},
		Stop: func(ctx context.Context) error { return src.Stop(ctx) },
	}
}

// member is a stream's consumer-group member.
func (w *wiring) member(g member.Group) member.Config {
	return member.Config{Group: g, Poll: w.s.FlushInterval, Halts: halt.Store{Conn: w.conn}, Owner: owner(w.s.InstanceID),
		Now: w.e.Now, Logger: w.e.Logger, Registry: w.e.Registry}
}

func (w *wiring) likes() lifecycle.Part {
	var loader *likes.Loader
	return lifecycle.Part{
		Name: "likes loader",
		Start: func(context.Context) error {
			cfg := w.e.Config
			dial, err := cfg.Kafka.Security().Options()
			if err != nil {
				return err
			}
			loader, err = likes.New(likes.Config{
				Log:           likestate.Log{Brokers: cfg.Kafka.Brokers, Dial: dial, Topic: schemas.TopicLikes, Group: likes.DefaultGroup},
				FlushInterval: w.s.FlushInterval, MaxBatch: w.s.MaxBatch}, w.conn, w.e.Now, w.e.Logger, w.e.Registry)
			if err != nil {
				return err
			}
			loader.Start()
			return nil
		},
		Stop: func(ctx context.Context) error { return loader.Stop(ctx) },
	}
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
	// A table's rows expire, or with "table.column" that column's values, the rows staying.
	for _, t := range []struct {
		table, column string
		days          int
	}{
		{"view_deltas", "second", days(c.TTLSeconds)},
		{"views_by_minute", "minute", days(c.TTLMinutes)},
		{"views_by_hour", "hour", days(c.TTLDays)},
		{"unique_viewers_by_hour", "hour", days(c.TTLDays)},
		{"unique_viewers_by_hour.minutes", "hour", days(c.TTLMinutes)}, // an hour's minutes, as long as the minutes' views
		{"click_deltas", "minute", days(c.TTLMinutes)},
		{"clicks_by_hour", "hour", days(c.TTLDays)},
		{"click_group_hours", "hour", days(c.TTLDays)},
		{"clicks_counted", "toDateTime(ts)", days(c.Clicks.CountedTTL)},
		{"click_verdicts", "toDateTime(decided_at)", days(c.Clicks.CountedTTL)},
	} {
		table, what := t.table, "MODIFY"
		if tbl, col, ok := strings.Cut(t.table, "."); ok {
			table, what = tbl, "MODIFY COLUMN "+col
		}
		q := fmt.Sprintf("ALTER TABLE %s %s TTL %s + INTERVAL %d DAY SETTINGS materialize_ttl_after_modify = 0", table, what, t.column, t.days)
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
