// Package archive is the sink's consumer: it reads the kept topics as a member of a consumer
// group and writes each partition's records as hourly Parquet files (package rawlog) to a store,
// then commits the offsets. It is replay-safe: a crash at any moment, followed by a replay from
// the committed offsets, leaves every record in exactly one file.
//
// A flush of a topic partition covers the records from the first uncommitted offset to the last
// one read, and ends when it is rotation old or holds MaxBatchBytes of decoded events. It is
// written in three steps:
//
//  1. a marker (rawlog.MarkerName) saying "flush [first, last] of this partition is being
//     written", made durable;
//  2. the flush's files, one per event hour, each written under a temporary name, fsynced and
//     renamed (on S3: uploaded whole) to a name derived from topic, hour, partition and range;
//  3. the Kafka commit of last+1, retried; if it cannot be made the consumer stops with an error.
//
// After a crash the partition resumes at the committed offset. A marker starting there names a
// flush that was written (perhaps partly) but not committed: the replay cuts its first flush at
// that marker's last offset, whatever the clock and size say, so it writes the same records into
// the same names, replacing what was there. A flush never starts before the previous one of its
// partition is committed, so at most one flush per partition is uncommitted. Without a marker at
// the committed offset nothing was written past it. Either way no record lands in two files and
// none is skipped.
//
// Concurrency and lifecycle: an Archive owns its Kafka client and two goroutines (the consumer
// loop and retention) from Start until Stop. Partition state is guarded by one mutex, held by the
// loop while it handles a poll and by the group callbacks (revoked partitions are flushed and
// committed before they move; lost ones are dropped, their temporary files removed).
package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

// DefaultGroup is the sink's consumer group.
const DefaultGroup = "tally-sink"

// Config says what the sink reads, where it writes and when it cuts files.
type Config struct {
	Brokers        []string
	Dial           []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options
	Group          string
	InstanceID     string
	SessionTimeout time.Duration
	Topics         []rawlog.Topic
	// Rotation is the longest a record waits before its file is readable.
	Rotation time.Duration
	// MaxBatchBytes ends a flush early once its decoded events reach this size.
	MaxBatchBytes int64
	// Retention per topic name; RetentionEvery is how often old hours are deleted.
	Retention      map[string]time.Duration
	RetentionEvery time.Duration
}

// Archive is a running sink consumer.
type Archive struct {
	cfg    Config
	store  store.Store
	logger *slog.Logger
	now    func() time.Time
	cl     *kgo.Client
	topics map[string]rawlog.Topic
	m      metrics

	mu    sync.Mutex
	parts map[tp]*partition

	running context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	retired chan struct{}
}

type tp struct {
	topic     string
	partition int32
}

// partition is one topic partition's open flush.
type partition struct {
	topic  rawlog.Topic
	id     int32
	marker *rawlog.Marker // read at the first record after assignment; nil when none applies
	seen   bool           // the first record since assignment was handled
	batch  rawlog.Batch
	files  map[time.Time]store.File
	first  int64
	last   int64
	epoch  int32
	opened time.Time
	n      int // records in the flush, decodable or not
}

// New joins the group; Start begins consuming.
func New(cfg Config, st store.Store, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) (*Archive, error) {
	a := &Archive{cfg: cfg, store: st, logger: logger, now: now, topics: map[string]rawlog.Topic{}, parts: map[tp]*partition{}, m: newMetrics(reg)}
	a.running, a.cancel = context.WithCancel(context.Background())
	names := make([]string, 0, len(cfg.Topics))
	for _, t := range cfg.Topics {
		a.topics[t.Name] = t
		names = append(names, t.Name)
	}
	opts := append(append(append(kafka.ClientOptions(cfg.Brokers, "tally-sink", logger, reg), cfg.Dial...),
		kafka.GroupTimeouts(cfg.SessionTimeout)...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(names...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.OnPartitionsRevoked(a.revoked),
		kgo.OnPartitionsLost(a.lost),
	)
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create sink consumer: %w", err)
	}
	a.cl = cl
	return a, nil
}

// Start begins consuming, and deleting expired hours, in goroutines that run until Stop.
func (a *Archive) Start() {
	a.done, a.retired = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.done)
		a.err = a.run(a.running)
	}()
	go func() {
		defer close(a.retired)
		a.retainLoop(a.running)
	}()
}

// Done is closed when the consumer loop ends, on Stop or on its own (a write or commit that
// could not be made).
func (a *Archive) Done() <-chan struct{} { return a.done }

// Err is why the loop ended; valid once Done is closed.
func (a *Archive) Err() error { return a.err }

// Stop ends consuming, flushes and commits what is open, and leaves the group.
func (a *Archive) Stop(ctx context.Context) error {
	a.cancel()
	<-a.done
	<-a.retired
	runErr := a.err
	if errors.Is(runErr, context.Canceled) {
		runErr = nil
	}
	a.mu.Lock()
	var err error
	if runErr == nil {
		err = a.flushAll(ctx, func(*partition) bool { return true })
	}
	a.dropAll()
	a.mu.Unlock()
	kafka.LeaveStatic(ctx, a.cl, a.logger)
	a.cl.Close()
	return errors.Join(runErr, err)
}

// poll is the longest one poll waits, so rotation stays on time on an idle topic.
func (a *Archive) poll() time.Duration { return min(a.cfg.Rotation/4, time.Second) }

func (a *Archive) run(ctx context.Context) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, a.poll())
		fetches := a.cl.PollRecords(pctx, 20000)
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			a.cl.AllowRebalance()
			return ctx.Err()
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				a.logger.Warn("sink fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		a.mu.Lock()
		err := a.handle(ctx, fetches)
		if err == nil {
			now := a.now()
			err = a.flushAll(ctx, func(p *partition) bool { return p.marker == nil && now.Sub(p.opened) >= a.cfg.Rotation })
		}
		a.mu.Unlock()
		a.cl.AllowRebalance()
		if err != nil {
			return err
		}
	}
}

// handle adds a poll's records to their partitions' flushes, cutting flushes where a marker or
// the size bound says.
func (a *Archive) handle(ctx context.Context, fetches kgo.Fetches) error {
	var err error
	fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
		if err != nil || len(ftp.Records) == 0 {
			return
		}
		t, ok := a.topics[ftp.Topic]
		if !ok {
			return
		}
		key := tp{ftp.Topic, ftp.Partition}
		p := a.parts[key]
		if p == nil {
			p = &partition{topic: t, id: ftp.Partition}
			a.parts[key] = p
		}
		for _, r := range ftp.Records {
			if err = a.add(ctx, p, r); err != nil {
				return
			}
		}
		a.m.records.WithLabelValues(ftp.Topic).Add(float64(len(ftp.Records)))
	})
	return err
}

func (a *Archive) add(ctx context.Context, p *partition, r *kgo.Record) error {
	if !p.seen {
		p.seen = true
		m, err := a.readMarker(ctx, p)
		if err != nil {
			return err
		}
		if m != nil && m.First == r.Offset {
			p.marker = m
			a.logger.Info("replaying an uncommitted flush into the same files", "topic", p.topic.Name, "partition", p.id, "first", m.First, "last", m.Last)
		} else if m != nil && m.First < r.Offset && r.Offset <= m.Last {
			// Only a log that lost records (retention) resumes inside a flush.
			a.logger.Error("resuming inside a flush the marker names; the records from here to its end may be in two files",
				"topic", p.topic.Name, "partition", p.id, "marker_first", m.First, "marker_last", m.Last, "resume", r.Offset)
		}
	}
	if p.marker != nil && r.Offset > p.marker.Last && p.batch != nil {
		// The marker's last record is gone from the log: cut where it said anyway.
		if err := a.flush(ctx, p); err != nil {
			return err
		}
	}
	if p.batch == nil {
		p.first, p.opened, p.files, p.n = r.Offset, a.now(), map[time.Time]store.File{}, 0
		p.batch = p.topic.NewBatch(func(hour time.Time) (io.Writer, error) {
			f, err := a.store.Create(rawlog.HourPrefix(p.topic.Name, hour))
			if err != nil {
				return nil, err
			}
			p.files[hour] = f
			return f, nil
		})
	}
	if err := p.batch.Add(r.Partition, r.Offset, r.Value); err != nil {
		var we *rawlog.WriteError
		if errors.As(err, &we) {
			return fmt.Errorf("write %s partition %d at offset %d: %w", p.topic.Name, p.id, r.Offset, err)
		}
		a.m.undecodable.WithLabelValues(p.topic.Name).Inc()
		a.logger.Warn("undecodable record kept in no file", "topic", p.topic.Name, "partition", p.id, "offset", r.Offset, "err", err)
	}
	p.last, p.epoch = r.Offset, r.LeaderEpoch
	p.n++
	switch {
	case p.marker != nil:
		if r.Offset >= p.marker.Last {
			return a.flush(ctx, p)
		}
	case p.batch.Bytes() >= a.cfg.MaxBatchBytes:
		return a.flush(ctx, p)
	}
	return nil
}

// Check reports whether the sink reaches Kafka, for readiness.
func (a *Archive) Check(ctx context.Context) error { return a.cl.Ping(ctx) }
