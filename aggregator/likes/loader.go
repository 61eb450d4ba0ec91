// Package likes loads the like log (Kafka topic likes) into ClickHouse's likes table for
// dashboards. The log is the source of truth and the table is derived from it: every record
// becomes one row keyed by (item, user) with its partition and offset, and the table's
// ReplacingMergeTree(offset) keeps the pair's last record in log order, so loading a record
// twice writes an identical row that changes no answer. Offsets are committed to Kafka only
// after the insert succeeded; a ClickHouse error is retried with backoff (the loader lags, it
// loses nothing), and a crash replays at most the uncommitted batch.
//
// Concurrency and lifecycle: a Loader reads the log through a likestate.Follower, which owns
// its consumer-group client and one goroutine from Start until Stop. Rebalances wait until the
// batch in hand is inserted and committed.
package likes

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/retry"
)

// DefaultGroup is the consumer group of the loaders.
const DefaultGroup = "tally-likes-loader"

// Config says what the loader reads and how it batches.
type Config struct {
	likestate.Log
	FlushInterval time.Duration // longest wait for a batch to fill
	MaxBatch      int           // most records in one insert
}

// Loader copies like records from Kafka into ClickHouse.
type Loader struct {
	f      *likestate.Follower
	conn   driver.Conn
	dead   *deadletter.Writer
	logger *slog.Logger

	rows, insertErrors prometheus.Counter
	insertSeconds      prometheus.Histogram
}

// New joins cfg.Group; Start begins loading. Records that do not decode or validate are set
// aside in dead_letters (source cfg.Topic), counted in tally_dead_letters_total.
func New(cfg Config, conn driver.Conn, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) (*Loader, error) {
	l := &Loader{
		conn: conn, dead: deadletter.New(now, logger, reg, cfg.Topic), logger: logger,
		rows:         prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_loader_rows_total", Help: "Like records inserted into ClickHouse (replays included)."}),
		insertErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_loader_insert_errors_total", Help: "ClickHouse inserts of like records that failed and were retried."}),
		insertSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_likes_loader_insert_seconds", Help: "Time to insert one batch of like records.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
	}
	reg.MustRegister(l.rows, l.insertErrors, l.insertSeconds)
	// Records are held for up to FlushInterval (or MaxBatch of them) per insert: the engine
	// runs one statement at a time with a fixed cost each, so a busy topic must not turn into
	// an insert per poll.
	f, err := likestate.NewFollower(likestate.FollowConfig{
		Log: cfg.Log, ClientID: "tally-likes-loader",
		Client:   append(kafka.GroupTimeouts(10*time.Second), kgo.FetchMaxWait(100*time.Millisecond)),
		MaxBatch: cfg.MaxBatch, Linger: cfg.FlushInterval, Idle: cfg.FlushInterval,
	}, likestate.Handler{Handle: l.insertRetrying}, logger)
	if err != nil {
		return nil, fmt.Errorf("create likes loader: %w", err)
	}
	l.f = f
	return l, nil
}

// Start begins loading in a goroutine that runs until Stop.
func (l *Loader) Start() { l.f.Start() }

// Stop ends loading and leaves the group. A batch whose insert was still being retried is not
// committed; the next owner loads it again, which changes nothing.
func (l *Loader) Stop(ctx context.Context) error { return l.f.Stop(ctx) }

// insertRetrying inserts b until it succeeds; only ctx ends the retries (the loader lags, it
// loses nothing).
func (l *Loader) insertRetrying(ctx context.Context, b likestate.Batch) error {
	return retry.Do(ctx, 5*time.Second, func() error {
		t0 := time.Now()
		if err := l.insert(ctx, b); err != nil {
			return err
		}
		l.insertSeconds.Observe(time.Since(t0).Seconds())
		return nil
	}, func(err error, wait time.Duration) {
		l.insertErrors.Inc()
		l.logger.Warn("insert like records into clickhouse; retrying", "records", len(b.Records)+len(b.Bad), "err", err, "backoff", wait)
	})
}

// insert writes b's likes as one INSERT block, after setting its bad records aside, the same
// way on every replay (the decision depends on the bytes alone).
func (l *Loader) insert(ctx context.Context, b likestate.Batch) error {
	letters := make([]deadletter.Letter, len(b.Bad))
	for i, r := range b.Bad {
		letters[i] = deadletter.OfRecord(r.Rec.Topic, r.Rec.Partition, r.Rec.Offset, r.Rec.Key, r.Rec.Value, r.Err)
	}
	if err := l.dead.Write(ctx, l.conn, letters); err != nil {
		return err
	}
	err := chclient.Insert(ctx, l.conn, fmt.Sprintf("%d like records", len(b.Records)), likestate.InsertLikes, func(add func(...any) error) error {
		for _, r := range b.Records {
			if err := likestate.AppendLike(add, r.Like, r.Partition, r.Offset); err != nil {
				return fmt.Errorf("like %s/%s at %d/%d: %w", r.Like.ItemID, r.Like.UserID, r.Partition, r.Offset, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.rows.Add(float64(len(b.Records)))
	return nil
}
