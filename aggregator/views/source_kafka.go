package views

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"tally/aggregator/member"
	"tally/platform/kafka"
	"tally/platform/retry"
	"tally/schemas"
)

// Source consumes the views topic as a member of a consumer group and feeds an Aggregator. It
// owns its Kafka client and the goroutine started by Start; Stop ends both after a last flush.
type Source struct {
	cl     *kgo.Client
	agg    *Aggregator
	logger *slog.Logger
	poll   time.Duration
	// running ends when Stop begins: it is the poll loop's context. It exists from NewSource
	// on, because the group may call back before Start.
	running context.Context
	cancel  context.CancelFunc
	stop    *member.Stop
	// clientSet is closed once cl is set: the group can assign partitions, and so call
	// adjustOffsets, which reads cl, before kgo.NewClient has returned it.
	clientSet chan struct{}
	done      chan struct{}
	err       error // why the loop ended; read after done is closed
}

// Group says which consumer group to join and how.
type Group struct {
	Brokers        []string
	Dial           []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options, added to every client's
	Name           string
	InstanceID     string // static membership when set
	SessionTimeout time.Duration
}

// NewSource joins the group. poll bounds how long one poll waits, so flushes stay on time when
// the topic is idle.
func NewSource(g Group, agg *Aggregator, poll time.Duration, logger *slog.Logger, reg prometheus.Registerer) (*Source, error) {
	s := &Source{agg: agg, logger: logger, poll: poll, clientSet: make(chan struct{})}
	s.running, s.cancel = context.WithCancel(context.Background())
	s.stop = member.New()
	opts := append(append(kafka.ClientOptions(g.Brokers, "tally-aggregator", logger, reg), g.Dial...),
		kgo.ConsumerGroup(g.Name),
		kgo.SessionTimeout(g.SessionTimeout),
		kgo.HeartbeatInterval(g.SessionTimeout/5),
		kgo.ConsumeTopics(schemas.TopicViews),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.AdjustFetchOffsetsFn(s.adjustOffsets),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	)
	if g.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(g.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create views consumer: %w", err)
	}
	s.cl = cl
	close(s.clientSet)
	return s, nil
}

// Start begins consuming in a goroutine.
func (s *Source) Start() {
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.err = s.run(s.running)
	}()
}

// Stop ends consumption and leaves the group at once, so that the group hands its partitions
// on and none comes in; the leave's revoke writes the batches held and commits. It gives up
// when ctx ends: what was not written, the next owner replays from the ClickHouse checkpoints.
func (s *Source) Stop(ctx context.Context) error {
	return s.stop.Leave(ctx, s.cl, "views", member.EndLoop(s.cancel, s.done, &s.err), func(ctx context.Context) error {
		done, err := s.agg.FlushAll(ctx)
		s.commit(ctx, done)
		return err
	})
}

// Done is closed when the loop ends, on Stop or on its own (a write that could not finish).
func (s *Source) Done() <-chan struct{} { return s.done }

// Err is why the loop ended; valid once Done is closed.
func (s *Source) Err() error { return s.err }

func (s *Source) run(ctx context.Context) error {
	var offsets []int64
	var values [][]byte
	for {
		pctx, cancel := context.WithTimeout(ctx, s.poll)
		fetches := s.cl.PollRecords(pctx, 50000)
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			s.cl.AllowRebalance()
			return ctx.Err()
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.logger.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			offsets, values = offsets[:0], values[:0]
			for _, r := range ftp.Records {
				offsets = append(offsets, r.Offset)
				values = append(values, r.Value)
			}
			s.agg.Process(ftp.Partition, offsets, values)
		})
		if ids := s.agg.Reclaims(); len(ids) > 0 {
			if err := s.reclaim(ctx, ids); err != nil {
				s.cl.AllowRebalance()
				return err
			}
		}
		if s.agg.FlushDue() {
			done, err := s.agg.Flush(ctx)
			if err != nil {
				s.cl.AllowRebalance()
				return err
			}
			s.commit(ctx, done)
		}
		s.cl.AllowRebalance()
	}
}

// reclaim claims ids again (they were dropped for a newer owner's claim, yet the group still
// assigns them here) and seeks each to where Assign says it resumes.
func (s *Source) reclaim(ctx context.Context, ids []int32) error {
	var resume map[int32]int64
	if err := retry.Do(ctx, 5*time.Second, func() error {
		var err error
		resume, err = s.agg.Assign(ctx, ids)
		return err
	}, func(err error, wait time.Duration) {
		s.logger.Warn("claim partitions again; retrying", "partitions", ids, "err", err, "backoff", wait)
	}); err != nil {
		return fmt.Errorf("claim partitions %v again: %w", ids, err)
	}
	offs := make(map[int32]kgo.EpochOffset, len(resume))
	for id, off := range resume {
		offs[id] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{schemas.TopicViews: offs})
	s.logger.Warn("claimed partitions again that the group still assigns here", "partitions", ids)
	return nil
}

// commit records the checkpoints in Kafka too. ClickHouse holds the authoritative checkpoint;
// Kafka's copy serves lag monitoring and the fallback when ClickHouse has none, so an error here
// is logged, not fatal.
func (s *Source) commit(ctx context.Context, done map[int32]int64) {
	if len(done) == 0 {
		return
	}
	offs := make(map[int32]kgo.EpochOffset, len(done))
	for p, o := range done {
		offs[p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	s.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{schemas.TopicViews: offs},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				s.logger.Warn("commit offsets to kafka", "err", err)
			}
		})
}

// adjustOffsets runs after the group assigned partitions and fetched Kafka's committed offsets:
// it loads each partition's state from ClickHouse and resumes at the ClickHouse checkpoint.
func (s *Source) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	ctx, cancel := s.stop.Until(ctx)
	defer cancel()
	if err := s.stop.Refuse(); err != nil {
		return nil, fmt.Errorf("load partition state: %w", err)
	}
	select {
	case <-s.clientSet:
	case <-ctx.Done():
		return nil, fmt.Errorf("load partition state: %w", ctx.Err())
	}
	parts := offsets[schemas.TopicViews]
	ids := make([]int32, 0, len(parts))
	for id := range parts {
		ids = append(ids, id)
	}
	var resume map[int32]int64
	err := retry.Do(ctx, 5*time.Second, func() error {
		if s.agg.partitionCount() == 0 {
			n, err := kafka.Partitions(ctx, s.cl, schemas.TopicViews)
			if err != nil {
				return err
			}
			s.agg.SetPartitions(n)
		}
		var err error
		resume, err = s.agg.Assign(ctx, ids)
		return err
	}, func(err error, wait time.Duration) {
		s.agg.progress.failed(s.agg.now(), fmt.Errorf("load partition state: %w", err))
		s.logger.Warn("load partition state; retrying", "err", err, "backoff", wait)
	})
	if err != nil {
		return nil, fmt.Errorf("load partition state: %w", err)
	}
	s.agg.progress.succeeded(s.agg.now())
	for id, off := range resume {
		parts[id] = kgo.NewOffset().At(off).WithEpoch(-1)
	}
	return offsets, nil
}

func (s *Source) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ctx, cancel := s.stop.Until(ctx)
	defer cancel()
	done, err := s.agg.Revoke(ctx, revoked[schemas.TopicViews])
	if err != nil {
		s.logger.Error("write batches of revoked partitions; the next owner replays them", "err", err)
	}
	s.commit(ctx, done)
}

func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.agg.Lost(lost[schemas.TopicViews])
}
