// Package topk is the top-K component: it reads the deduplicated counts the aggregators
// publish to the counted topic (never raw events, so it never deduplicates a second time),
// keeps the exact 1m and 1h windows and the approximate 24h window of items and ads
// (package tracker), and publishes every kind's lists every topk.publish_interval to Redis (which
// the collector's GET /v1/top reads), the compacted topk topic and ClickHouse topk_snapshots.
//
// Exactly once after a crash (docs/ARCHITECTURE.md, "top-K"): the consumer loop saves the state
// together with the offsets it reflects (tracker.Save); a restart loads it and reads the counted
// topic from those offsets; batches the aggregators published twice are skipped by the
// per-source-partition guards. The exact windows depend only on which counts were applied, not
// on their order or on when the process ran, so the restarted lists equal the lists of the log.
//
// Concurrency and lifecycle: Service owns two goroutines, the consumer loop (applies records,
// saves snapshots) and the publisher loop (slides the windows, publishes). Start starts them;
// Stop ends both, then saves a last snapshot.
package topk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/topk/tracker"
)

// Config tunes the service.
type Config struct {
	Brokers          []string
	Dial             []kgo.Opt
	Partitions       int              // the counted topic is created with this many if missing
	Durability       kafka.Durability // and with this replication
	PublishInterval  time.Duration
	SnapshotInterval time.Duration
	SnapshotPath     string
	Tracker          tracker.Options
	ColdReplay       time.Duration
}

// Service consumes, ranks and publishes.
type Service struct {
	cfg    Config
	out    *Outputs
	now    func() time.Time
	logger *slog.Logger
	m      metrics

	tr          *tracker.Tracker
	cl          *kgo.Client
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	lastPublish atomic.Int64 // Unix ms of the last publish every output took
}

type metrics struct {
	applied              *prometheus.CounterVec
	skipped, undecodable prometheus.Counter
	publishSeconds       prometheus.Histogram
	publishErrors        *prometheus.CounterVec
	snapshotSeconds      prometheus.Histogram
	snapshotErrors       prometheus.Counter
	keys, entries        prometheus.GaugeFunc
	late, dayLate        prometheus.CounterFunc
	lag                  prometheus.Gauge
}

// New loads the snapshot (or starts empty) and connects to Kafka; Start begins the work.
func New(ctx context.Context, cfg Config, out *Outputs, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	s := &Service{cfg: cfg, out: out, now: now, logger: logger}
	t0 := time.Now()
	tr, err := tracker.Load(cfg.SnapshotPath, cfg.Tracker, now())
	if err != nil {
		// A damaged snapshot is not fatal: the counted topic holds what it summarised.
		logger.Warn("topk snapshot unreadable; replaying the counted topic instead", "err", err)
	}
	offsets := map[int32]kgo.Offset{}
	cold := kgo.NewOffset().AfterMilli(now().Add(-cfg.ColdReplay).UnixMilli())
	if tr != nil {
		for p, o := range tr.Offsets() {
			offsets[p] = kgo.NewOffset().At(o)
		}
		logger.Info("topk state restored", "path", cfg.SnapshotPath, "partitions", len(offsets), "took", time.Since(t0).Round(time.Millisecond))
	} else {
		tr = tracker.New(cfg.Tracker, now())
		logger.Info("topk starts without a snapshot; replaying the counted topic", "since", now().Add(-cfg.ColdReplay))
	}
	s.tr = tr

	opts := append(kafka.ClientOptions(cfg.Brokers, "tally-topk-admin", logger, nil), cfg.Dial...)
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("topk kafka client: %w", err)
	}
	defer admin.Close()
	if err := kafka.CreateTopics(ctx, admin, cfg.Durability, kafka.TopicSpec{Name: schemas.TopicCounted, Partitions: int32(cfg.Partitions)}); err != nil {
		return nil, err
	}
	n, err := kafka.Partitions(ctx, admin, schemas.TopicCounted)
	if err != nil {
		return nil, err
	}
	for p := range int32(n) {
		if _, ok := offsets[p]; !ok {
			offsets[p] = cold
		}
	}
	opts = append(kafka.ClientOptions(cfg.Brokers, "tally-topk", logger, reg), cfg.Dial...)
	opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{schemas.TopicCounted: offsets}))
	if s.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("topk consumer: %w", err)
	}

	s.m = metrics{
		applied:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_topk_chunks_applied_total", Help: "Counted records (batch chunks) applied, by kind."}, []string{"kind"}),
		skipped:     prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_topk_chunks_skipped_total", Help: "Counted records skipped because their chunk was applied already (a batch published twice)."}),
		undecodable: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_topk_undecodable_total", Help: "Counted records that did not decode or validate, skipped."}),
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_topk_publish_seconds", Help: "Time to compute and publish every list.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_topk_publish_errors_total", Help: "Failed publishes, by output."}, []string{"output"}),
		snapshotSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_topk_snapshot_seconds", Help: "Time to save a snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		snapshotErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_topk_snapshot_errors_total", Help: "Failed snapshot saves (retried at the next interval)."}),
		keys: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_topk_keys", Help: "Keys held by the exact windows."},
			func() float64 { return float64(tr.Stats().Keys) }),
		entries: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_topk_bucket_counts", Help: "(key, bucket) counts held by the exact windows."},
			func() float64 { return float64(tr.Stats().Entries) }),
		late: prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tally_topk_dropped_events_total", Help: "Events no exact window (1m, 1h) took: late beyond the hour, or too far ahead (the 24h list still counts those of its hours)."},
			func() float64 { return float64(tr.Stats().Dropped) }),
		dayLate: prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tally_topk_day_dropped_events_total", Help: "Events whose hour was outside the 24h window when they arrived (counted by no list)."},
			func() float64 { return float64(tr.Stats().DayDropped) }),
	}
	for _, k := range schemas.CountKinds {
		s.m.applied.WithLabelValues(k.String())
	}
	s.m.lag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_topk_lag_records", Help: "Counted records published but not yet read by topk, at the last publish."})
	reg.MustRegister(s.m.lag, s.m.applied, s.m.skipped, s.m.undecodable, s.m.publishSeconds, s.m.publishErrors, s.m.snapshotSeconds, s.m.snapshotErrors,
		s.m.keys, s.m.entries, s.m.late, s.m.dayLate)
	s.lastPublish.Store(now().UnixMilli())
	return s, nil
}

// Start runs the consumer and publisher loops.
func (s *Service) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() { s.consume(ctx) })
	s.wg.Go(func() { s.publishLoop(ctx) })
}

// Stop ends both loops, saves a last snapshot and closes the consumer.
func (s *Service) Stop(ctx context.Context) error {
	if s.cancel != nil {
		s.cancel()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("stop topk: %w", ctx.Err())
	}
	err := s.save()
	s.cl.Close()
	return err
}

// Check is the readiness check: lists reached Redis, which the API reads, recently.
func (s *Service) Check(context.Context) error {
	age := s.now().Sub(time.UnixMilli(s.lastPublish.Load()))
	if age > 5*s.cfg.PublishInterval+5*time.Second {
		return fmt.Errorf("no list published for %s", age.Round(time.Second))
	}
	return nil
}

func (s *Service) consume(ctx context.Context) {
	lastSave := time.Now()
	dirty := false // records read since the last save
	for {
		// The poll is bounded so that a quiet topic still gets its snapshot saved.
		pctx, cancel := context.WithTimeout(ctx, s.cfg.SnapshotInterval)
		fs := s.cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				s.logger.Warn("fetch counted records", "partition", p, "err", err)
			}
		})
		skipped0 := s.tr.Skipped()
		fs.EachRecord(func(r *kgo.Record) {
			dirty = true
			c, err := schemas.DecodeCounted(r.Value)
			if err != nil {
				s.m.undecodable.Inc()
				s.tr.Skip(r.Partition, r.Offset)
				s.logger.Warn("counted record set aside", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			if s.tr.Apply(r.Partition, r.Offset, c) {
				s.m.applied.WithLabelValues(c.Kind.String()).Inc()
			}
		})
		s.m.skipped.Add(float64(s.tr.Skipped() - skipped0))
		if dirty && time.Since(lastSave) >= s.cfg.SnapshotInterval {
			lastSave, dirty = time.Now(), false
			if err := s.save(); err != nil {
				dirty = true
				s.m.snapshotErrors.Inc()
				s.logger.Warn("save topk snapshot; retrying at the next interval", "err", err)
			}
		}
	}
}

func (s *Service) save() error {
	t0 := time.Now()
	if err := s.tr.Save(s.cfg.SnapshotPath); err != nil {
		return err
	}
	s.m.snapshotSeconds.Observe(time.Since(t0).Seconds())
	return nil
}

func (s *Service) publishLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PublishInterval)
	defer t.Stop()
	for {
		s.publish(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publish slides the windows to now and writes every list to every output. An output that
// fails is logged and counted; the next interval publishes fresh lists anyway.
func (s *Service) publish(ctx context.Context) {
	t0 := time.Now()
	now := s.now()
	s.tr.Advance(now)
	var lists []schemas.TopList
	for _, k := range schemas.CountKinds {
		ls, err := s.tr.Lists(k, schemas.MaxTopK, now)
		if err != nil {
			s.logger.Error("compute top-K lists", "kind", k, "err", err)
			return
		}
		lists = append(lists, ls...)
	}
	errs := s.out.Publish(ctx, lists)
	if ctx.Err() != nil {
		return
	}
	for name, err := range errs {
		s.m.publishErrors.WithLabelValues(name).Inc()
		s.logger.Warn("publish top-K lists", "output", name, "err", err)
	}
	// Readiness follows what the API serves; the topic and the history lagging is logged.
	if errs["redis"] == nil && errs["encode"] == nil {
		s.lastPublish.Store(now.UnixMilli())
	}
	s.m.publishSeconds.Observe(time.Since(t0).Seconds())
	s.measureLag(ctx)
}

// measureLag sets the lag gauge: the counted topic's end offsets minus topk's next offsets.
func (s *Service) measureLag(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(s.cl).ListEndOffsets(ctx, schemas.TopicCounted)
	if err != nil {
		return // the fetches log Kafka's trouble
	}
	next := s.tr.Offsets()
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			if n, ok := next[o.Partition]; ok {
				lag += max(0, o.Offset-n)
			} else {
				lag += o.Offset // nothing read yet: an upper bound
			}
		}
	})
	s.m.lag.Set(float64(lag))
}
