// Package collector wires the collector component: a Kafka producer, the ClickHouse client of
// the read API, one Redis client for reads and likes, the likes applier, and the HTTP API (ingest, reads, the live page at /, /healthz, /readyz, /metrics),
// behind checks against other sites' web pages and, when auth is on, access control (access.go;
// /metrics then moves to an admin server). Parts
// start the clients before the listener and stop in reverse: the listener stops taking requests
// and drains them, then the producer flushes what is buffered and the clients close.
package collector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/collector/counters"
	"github.com/tallypipeline/tally/collector/ingest"
	"github.com/tallypipeline/tally/collector/likes"
	"github.com/tallypipeline/tally/collector/openapi"
	"github.com/tallypipeline/tally/collector/read"
	"github.com/tallypipeline/tally/collector/reports"
	"github.com/tallypipeline/tally/collector/web"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/cli"
	counterstate "github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/clickconf"
	"github.com/tallypipeline/tally/schemas/migrate"
)

// Parts returns the collector's lifecycle parts. e.Config is read when the parts start, so embedded
// infrastructure started earlier can fill in its addresses. addr reports the bound listen
// address once started.
func Parts(e cli.Env, s *collectorconf.Settings) (parts []lifecycle.Part, addr func() string) {
	mux := http.NewServeMux()
	w := &wiring{e: e, s: s, routes: api.NewRouter(mux, e.Registry)}
	web.Register(mux)
	openapi.Register(mux)
	handler, adminParts := access(e.Config, s, mux, e.Runner, e.Logger, e.Registry, e.Now)
	server, addrFn := lifecycle.HTTPServerWithLimits("collector http", s.Addr, handler, lifecycle.HTTPLimits{
		ReadHeaderTimeout: s.ReadHeaderTimeout, ReadTimeout: s.ReadTimeout,
		WriteTimeout: s.WriteTimeout, IdleTimeout: s.IdleTimeout,
	})
	return append(append([]lifecycle.Part{w.stores(), w.producer(), w.counters(), w.likes(), w.policy()}, adminParts...), server), addrFn
}

// policy fails the start if a route the parts before it registered has no entry in the access
// policy (auth.CollectorRoutes), which would leave it to the admin scope with access control on.
func (w *wiring) policy() lifecycle.Part {
	return lifecycle.Part{
		Name: "collector route policy",
		Start: func(context.Context) error {
			if missing := auth.Unlisted(w.routes.Patterns()); len(missing) > 0 {
				return fmt.Errorf("routes without an access policy (add them to auth.CollectorRoutes): %v", missing)
			}
			return nil
		},
		Stop: func(context.Context) error { return nil },
	}
}

// wiring holds what the collector's parts share: each is made by a method, and sets what
// the parts after it use once it starts.
type wiring struct {
	e         cli.Env
	s         *collectorconf.Settings
	routes    *api.Router
	cl        *kgo.Client
	likeStore *likestate.Store
	conn      driver.Conn
	rdb       redis.UniversalClient
}

// stores opens ClickHouse and Redis and registers the reads.
func (w *wiring) stores() lifecycle.Part {
	cfg, logger := w.e.Config, w.e.Logger
	return lifecycle.Part{
		Name: "collector clickhouse, redis and reads",
		Start: func(ctx context.Context) error {
			octx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			var err error
			w.conn, err = chclient.Open(octx, cfg.ClickHouse.Options())
			if err != nil {
				return err
			}
			if _, err := migrate.ApplyTo(octx, w.conn, logger, migrate.Target{Cluster: cfg.ClickHouse.Cluster}); err != nil {
				w.conn.Close()
				return err
			}
			// One client for view totals and likes, so that a feed page's counts and like
			// totals share one round trip.
			if w.rdb, err = redisclient.New(cfg.Redis.Options()); err != nil {
				w.conn.Close()
				return err
			}
			// Ingest needs only Kafka: a ClickHouse or Redis outage degrades reads, which answer
			// 503 on their own, and keeps the collector in its Service.
			w.e.Runner.AddDegradingCheck("collector clickhouse", w.conn.Ping)
			w.e.Runner.AddDegradingCheck("collector redis", func(ctx context.Context) error { return w.rdb.Ping(ctx).Err() })
			w.likeStore = likestate.NewStore(w.rdb)
			read.New(read.Options{ClickHouse: w.conn, Redis: w.rdb, Likes: likestate.QueueTotals, Now: w.e.Now, Logger: logger, Registry: w.e.Registry,
				FallbackTimeout: w.s.FallbackTimeout}).Register(w.routes)
			reports.New(reports.Options{ClickHouse: w.conn, Logger: logger}).Register(w.routes)
			return nil
		},
		Stop: func(context.Context) error {
			return errors.Join(w.rdb.Close(), w.conn.Close())
		},
	}
}

// counters loads the counter namespaces, registers the counter routes and keeps the namespaces
// fresh until it stops. Its eventual namespaces' adds go through the producer.
func (w *wiring) counters() lifecycle.Part {
	var cancel context.CancelFunc
	done := make(chan struct{})
	return lifecycle.Part{
		Name: "counter namespaces",
		Start: func(ctx context.Context) error {
			reg := counterstate.NewRegistry(counterstate.Store{Conn: w.conn}, w.e.Now, w.e.Logger)
			if err := reg.Refresh(ctx); err != nil {
				return err
			}
			counters.New(counters.Options{Namespaces: reg, BestEffort: counterstate.NewBestEffort(w.rdb), Producer: w.cl,
				ProduceTimeout: w.e.Config.Kafka.ProduceTimeout, ClickHouse: w.conn, Now: w.e.Now, Logger: w.e.Logger}).Register(w.routes)
			var rctx context.Context
			rctx, cancel = context.WithCancel(context.Background())
			go func() {
				defer close(done)
				reg.Run(rctx)
			}()
			return nil
		},
		Stop: func(context.Context) error {
			cancel()
			<-done
			return nil
		},
	}
}

// producer starts the Kafka producer, creates the topics and registers ingest.
func (w *wiring) producer() lifecycle.Part {
	cfg, s := w.e.Config, w.s
	return lifecycle.Part{
		Name: "collector kafka producer",
		Start: func(ctx context.Context) error {
			dial, err := cfg.Kafka.Security().Options()
			if err != nil {
				return err
			}
			opts := append(append(kafka.ClientOptions(cfg.Kafka.Brokers, "tally-collector", w.e.Logger, w.e.Registry), dial...),
				kafka.ProducerOptions(cfg.Kafka.Producer(cfg.Kafka.MaxBuffered))...)
			if w.cl, err = kgo.NewClient(opts...); err != nil {
				return fmt.Errorf("create producer: %w", err)
			}
			tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := kafka.CreateTopics(tctx, w.cl, cfg.Kafka.Durability(),
				kafka.TopicSpec{Name: schemas.TopicViews, Partitions: int32(cfg.Kafka.Partitions), Retention: cfg.Kafka.ViewsRetention},
				kafka.TopicSpec{Name: schemas.TopicLikes, Partitions: int32(cfg.Kafka.Partitions), Retention: kafka.Forever},
				kafka.TopicSpec{Name: schemas.TopicClicks, Partitions: int32(cfg.Kafka.Partitions), Retention: cfg.Kafka.ViewsRetention},
				kafka.TopicSpec{Name: schemas.TopicFraudVerdicts, Partitions: int32(cfg.Kafka.Partitions), Retention: cfg.Kafka.ViewsRetention},
				kafka.TopicSpec{Name: schemas.TopicCounterEvents, Partitions: int32(cfg.Kafka.Partitions), Retention: cfg.Kafka.ViewsRetention}); err != nil {
				w.cl.Close()
				return err
			}
			w.e.Runner.AddCheck("collector kafka", w.cl.Ping)
			keys, err := clickKeys(&s.ClickIDs)
			if err != nil {
				return err
			}
			ingest.New(ingest.Config{
				MaxBodyBytes: int64(s.MaxBodyBytes),
				MaxLines:     s.MaxLines,
				Bounds:       schemas.TimeBounds{Future: s.FutureBound, Late: s.LateBound},

				MaxConcurrentBodies: s.MaxConcurrentBodies,
				ClickKeys:           keys,
				MaxRenderAge:        s.ClickIDs.MaxRenderAge,
				Encoding:            cfg.Kafka.Encoding(),
			}, w.cl, w.e.Now, w.e.Logger, w.e.Registry).Register(w.routes)
			return nil
		},
		Stop: func(ctx context.Context) error {
			err := w.cl.Flush(ctx)
			w.cl.Close()
			if err != nil {
				return fmt.Errorf("flush producer: %w", err)
			}
			return nil
		},
	}
}

// likes registers the likes handler and starts the applier. Changes go to the log through the
// producer, then to Redis; the applier repairs a change that reached only the log and rebuilds
// Redis when it comes back empty.
func (w *wiring) likes() lifecycle.Part {
	cfg := w.e.Config
	var applier *likes.Applier
	return lifecycle.Part{
		Name: "likes handler and applier",
		Start: func(context.Context) error {
			likes.NewHandler(likes.HandlerOptions{Store: w.likeStore, Producer: w.cl, Topic: schemas.TopicLikes, ProduceTimeout: cfg.Kafka.ProduceTimeout,
				Encoding: cfg.Kafka.Encoding(), Now: w.e.Now, Logger: w.e.Logger}).Register(w.routes)
			dial, err := cfg.Kafka.Security().Options()
			if err != nil {
				return err
			}
			applier, err = likes.NewApplier(likes.ApplierConfig{
				Log:        likestate.Log{Brokers: cfg.Kafka.Brokers, Dial: dial, Topic: schemas.TopicLikes, Group: likes.DefaultApplierGroup},
				InstanceID: likes.InstanceID(w.s.Addr), CheckEvery: time.Second},
				w.likeStore, w.e.Logger, w.e.Registry)
			if err != nil {
				return err
			}
			applier.Start()
			return nil
		},
		Stop: func(ctx context.Context) error { return applier.Stop(ctx) },
	}
}

// clickKeys builds the click-id keys from clicks.*; nil when no signing key is configured.
func clickKeys(c *clickconf.ClickIDs) (*schemas.ClickIDKeys, error) {
	if c.SigningKey == "" {
		return nil, nil
	}
	keys, err := c.ClickIDKeys()
	if err != nil {
		return nil, fmt.Errorf("config: clicks.keys: %w", err)
	}
	ks := make([]schemas.ClickIDKey, len(keys))
	for i, k := range keys {
		ks[i] = schemas.ClickIDKey{ID: k.ID, Secret: k.Secret}
	}
	out, err := schemas.NewClickIDKeys(c.SigningKey, ks)
	if err != nil {
		return nil, fmt.Errorf("config: clicks.keys: %w", err)
	}
	return out, nil
}
