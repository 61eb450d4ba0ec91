// Package likes loads the like log (Kafka topic likes) into ClickHouse's likes table for
// dashboards. The log is the source of truth and the table is derived from it: every record
// becomes one row keyed by (item, user) with its partition and offset, and the table's
// ReplacingMergeTree(offset) keeps the pair's last record in log order, so loading a record
// twice writes an identical row that changes no answer. Offsets are committed to Kafka only
// after the insert succeeded; a ClickHouse error is retried with backoff (the loader lags, it
// loses nothing), and a crash replays at most the uncommitted batch.
//
// Concurrency and lifecycle: a Loader owns its consumer-group client and one goroutine, from
// Start until Stop. Rebalances wait until the batch in hand is inserted and committed.
package likes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"tally/likestate"
	"tally/platform/kafka"
	"tally/platform/retry"
	"tally/schemas"
)

// DefaultGroup is the consumer group of the loaders.
const DefaultGroup = "tally-likes-loader"

// Config says what the loader reads and how it batches.
type Config struct {
	Brokers       []string
	Dial          []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options, added to every client's
	Topic         string    // schemas.TopicLikes in production; tests use their own
	Group         string
	FlushInterval time.Duration // longest wait for a batch to fill
	MaxBatch      int           // most records in one insert
}

// Loader copies like records from Kafka into ClickHouse.
type Loader struct {
	cfg    Config
	conn   driver.Conn
	cl     *kgo.Client
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	rows, undecodable, insertErrors prometheus.Counter
	insertSeconds                   prometheus.Histogram
}

// New joins cfg.Group; Start begins loading.
func New(cfg Config, conn driver.Conn, logger *slog.Logger, reg prometheus.Registerer) (*Loader, error) {
	l := &Loader{
		cfg: cfg, conn: conn, logger: logger,
		rows:         prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_loader_rows_total", Help: "Like records inserted into ClickHouse (replays included)."}),
		undecodable:  prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_loader_undecodable_total", Help: "Like records set aside in dead_letters because they did not decode or validate."}),
		insertErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_loader_insert_errors_total", Help: "ClickHouse inserts of like records that failed and were retried."}),
		insertSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_likes_loader_insert_seconds", Help: "Time to insert one batch of like records.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 14)}),
	}
	reg.MustRegister(l.rows, l.undecodable, l.insertErrors, l.insertSeconds)
	cl, err := kgo.NewClient(append(append(kafka.ClientOptions(cfg.Brokers, "tally-likes-loader", logger, nil), cfg.Dial...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)...)
	if err != nil {
		return nil, fmt.Errorf("create likes loader consumer: %w", err)
	}
	l.cl = cl
	return l, nil
}

// Start begins loading in a goroutine that runs until Stop.
func (l *Loader) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		l.run(ctx)
	}()
}

// Stop ends loading and leaves the group. A batch whose insert was still being retried is not
// committed; the next owner loads it again, which changes nothing.
func (l *Loader) Stop(ctx context.Context) error {
	l.cancel()
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("stop likes loader: %w", ctx.Err())
	}
	l.cl.Close()
	return nil
}

// run accumulates records for up to FlushInterval (or MaxBatch records) per insert: the engine
// runs one statement at a time with a fixed cost each, so a busy topic must not turn into an
// insert per poll. Records still pending when partitions move are simply loaded again by the
// next owner, which changes nothing (same rows, same versions).
func (l *Loader) run(ctx context.Context) {
	var pending []*kgo.Record
	last := time.Now()
	for {
		wait := max(l.cfg.FlushInterval-time.Since(last), time.Millisecond)
		pctx, cancel := context.WithTimeout(ctx, wait)
		fetches := l.cl.PollRecords(pctx, l.cfg.MaxBatch-len(pending))
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			l.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				l.logger.Warn("likes loader fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		pending = append(pending, fetches.Records()...)
		if len(pending) > 0 && (len(pending) >= l.cfg.MaxBatch || time.Since(last) >= l.cfg.FlushInterval) {
			if err := l.insertRetrying(ctx, pending); err != nil {
				l.cl.AllowRebalance()
				return // only ctx ends the retries
			}
			// A commit that fails is harmless: the records are loaded again later, identically.
			if err := l.cl.CommitRecords(ctx, pending...); err != nil && ctx.Err() == nil {
				l.logger.Warn("commit like loader offsets", "err", err)
			}
			pending = pending[:0]
		}
		if len(pending) == 0 {
			last = time.Now() // the interval runs from the first record waiting
		}
		l.cl.AllowRebalance()
	}
}

func (l *Loader) insertRetrying(ctx context.Context, recs []*kgo.Record) error {
	return retry.Do(ctx, 5*time.Second, func() error {
		t0 := time.Now()
		if err := l.insert(ctx, recs); err != nil {
			return err
		}
		l.insertSeconds.Observe(time.Since(t0).Seconds())
		return nil
	}, func(err error, wait time.Duration) {
		l.insertErrors.Inc()
		l.logger.Warn("insert like records into clickhouse; retrying", "records", len(recs), "err", err, "backoff", wait)
	})
}

// insert writes recs as one INSERT block. Records that do not decode or validate are set aside
// (deadletter.go) first, the same way on every replay.
func (l *Loader) insert(ctx context.Context, recs []*kgo.Record) error {
	b, err := l.conn.PrepareBatch(ctx, likestate.InsertLikes)
	if err != nil {
		return fmt.Errorf("prepare like insert: %w", err)
	}
	defer b.Abort()
	var bad []badRecord
	for _, r := range recs {
		lk, err := schemas.DecodeLike(r.Value)
		if err != nil {
			bad = append(bad, badRecord{r, err})
			continue
		}
		if err := likestate.AppendLike(b, lk, r.Partition, r.Offset); err != nil {
			return fmt.Errorf("append like %s/%s at %d/%d: %w", lk.ItemID, lk.UserID, r.Partition, r.Offset, err)
		}
	}
	if err := l.setAside(ctx, bad); err != nil {
		return err
	}
	if b.Rows() > 0 {
		if err := b.Send(); err != nil {
			return fmt.Errorf("insert %d like records: %w", b.Rows(), err)
		}
	}
	l.rows.Add(float64(len(recs) - len(bad)))
	l.undecodable.Add(float64(len(bad)))
	return nil
}
