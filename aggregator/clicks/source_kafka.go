package clicks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"tally/aggregator/member"
	"tally/platform/kafka"
	"tally/platform/retry"
	"tally/schemas"
)

// Source consumes the clicks and fraud_verdicts topics as a member of a consumer group and
// feeds an Aggregator. The group uses the range balancer, which gives partition p of both
// topics (they have the same partition count) to the same member. It owns its Kafka client
// and the goroutine started by Start; Stop ends both after a last flush.
type Source struct {
	cl      *kgo.Client
	agg     *Aggregator
	logger  *slog.Logger
	poll    time.Duration
	running context.Context
	cancel  context.CancelFunc
	stop    *member.Stop
	done    chan struct{}
	err     error
}

// Group says which consumer group to join and how.
type Group struct {
	Brokers        []string
	Dial           []kgo.Opt
	Name           string
	InstanceID     string
	SessionTimeout time.Duration
}

var topics = []string{schemas.TopicClicks, schemas.TopicFraudVerdicts}

// NewSource joins the group; poll bounds how long one poll waits.
func NewSource(g Group, agg *Aggregator, poll time.Duration, logger *slog.Logger) (*Source, error) {
	s := &Source{agg: agg, logger: logger, poll: poll}
	s.running, s.cancel = context.WithCancel(context.Background())
	s.stop = member.New()
	opts := append(append(kafka.ClientOptions(g.Brokers, "tally-aggregator-clicks", logger, nil), g.Dial...),
		kgo.ConsumerGroup(g.Name),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(g.SessionTimeout),
		kgo.HeartbeatInterval(g.SessionTimeout/5),
		kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.AdjustFetchOffsetsFn(s.adjustOffsets),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	)
	if g.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(g.InstanceID+"-clicks"))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create clicks consumer: %w", err)
	}
	s.cl = cl
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
	return s.stop.Leave(ctx, s.cl, "clicks", member.EndLoop(s.cancel, s.done, &s.err), func(ctx context.Context) error {
		done, err := s.agg.FlushAll(ctx)
		s.commit(ctx, done)
		return err
	})
}

// Done is closed when the loop ends, on Stop or on its own (a write that could not finish).
func (s *Source) Done() <-chan struct{} { return s.done }

// Err is why the loop ended; valid once Done is closed.
func (s *Source) Err() error { return s.err }

// Check reports whether the brokers answer (for /readyz).
func (s *Source) Check(ctx context.Context) error { return s.cl.Ping(ctx) }

func (s *Source) run(ctx context.Context) error {
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
			s.agg.Process(ftp.Topic, ftp.Partition, ftp.Records)
		})
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

// commit records the checkpoints in Kafka too, for lag monitoring; ClickHouse's are the ones
// that count.
func (s *Source) commit(ctx context.Context, done map[int32]offsets) {
	if len(done) == 0 {
		return
	}
	c, v := map[int32]kgo.EpochOffset{}, map[int32]kgo.EpochOffset{}
	for p, o := range done {
		c[p] = kgo.EpochOffset{Epoch: -1, Offset: o.clicks}
		v[p] = kgo.EpochOffset{Epoch: -1, Offset: o.verdicts}
	}
	s.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{schemas.TopicClicks: c, schemas.TopicFraudVerdicts: v},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				s.logger.Warn("commit click offsets to kafka", "err", err)
			}
		})
}

// partitionIDs is the union of the partition ids of both topics in m.
func partitionIDs[V any](m map[string]V, ids func(V) []int32) []int32 {
	var out []int32
	for _, t := range topics {
		if v, ok := m[t]; ok {
			for _, id := range ids(v) {
				if !slices.Contains(out, id) {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// adjustOffsets loads each assigned partition's state from ClickHouse and resumes both topics
// at its ClickHouse checkpoint.
func (s *Source) adjustOffsets(ctx context.Context, fetch map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	ctx, cancel := s.stop.Until(ctx)
	defer cancel()
	if err := s.stop.Refuse(); err != nil {
		return nil, fmt.Errorf("load click partition state: %w", err)
	}
	ids := partitionIDs(fetch, func(m map[int32]kgo.Offset) []int32 {
		out := make([]int32, 0, len(m))
		for id := range m {
			out = append(out, id)
		}
		return out
	})
	var resume map[int32]offsets
	err := retry.Do(ctx, 5*time.Second, func() error {
		var err error
		resume, err = s.agg.Assign(ctx, ids)
		return err
	}, func(err error, wait time.Duration) {
		s.logger.Warn("load click partition state; retrying", "err", err, "backoff", wait)
	})
	if err != nil {
		return nil, fmt.Errorf("load click partition state: %w", err)
	}
	for id, o := range resume {
		if m := fetch[schemas.TopicClicks]; m != nil {
			if _, ok := m[id]; ok {
				m[id] = kgo.NewOffset().At(o.clicks).WithEpoch(-1)
			}
		}
		if m := fetch[schemas.TopicFraudVerdicts]; m != nil {
			if _, ok := m[id]; ok {
				m[id] = kgo.NewOffset().At(o.verdicts).WithEpoch(-1)
			}
		}
	}
	return fetch, nil
}

func (s *Source) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ctx, cancel := s.stop.Until(ctx)
	defer cancel()
	done, err := s.agg.Revoke(ctx, partitionIDs(revoked, func(v []int32) []int32 { return v }))
	if err != nil {
		s.logger.Error("write batches of revoked click partitions; the next owner replays them", "err", err)
	}
	s.commit(ctx, done)
}

func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.agg.Lost(partitionIDs(lost, func(v []int32) []int32 { return v }))
}
