package member

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tallypipeline/tally/aggregator/halt"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/retry"
)

// Offsets are the next offsets to read, per topic and partition.
type Offsets map[string]map[int32]int64

// Resume is where assigned partitions resume (At), and the highest offset each has counted up
// to (Counted, where it differs from At: an engine whose writes lag one another replays from the
// lowest checkpoint). A partition absent from At (claimed for the first time, without a
// checkpoint) resumes where Kafka's committed offset says.
type Resume struct {
	At, Counted Offsets
}

// Engine is a stream's partition engine as a Source drives it: it owns the partitions' state,
// their claims and the exactly-once writes. The Source calls it from its poll loop and from the
// group's callbacks, never both at once (the client blocks rebalances while the loop works).
type Engine interface {
	// Assign claims partitions ids (of every topic of the stream) and loads their state; it
	// returns where each topic's partition resumes. The Source retries it while it fails.
	Assign(ctx context.Context, ids []int32) (Resume, error)
	// Process applies records of one topic's partition, in offset order.
	Process(topic string, id int32, recs []*kgo.Record)
	// Reclaims returns, and forgets, the partitions the engine dropped for a newer owner's claim
	// whose records the group still delivers here: the Source claims them again.
	Reclaims() []int32
	// Dropped returns, and forgets, the partitions the engine dropped for a newer owner's claim
	// since the last call: the Source fetches them again from their committed offset, so that
	// their records reach Process (and make them reclaims) while the group assigns them here.
	Dropped() []int32
	// FlushDue reports whether a flush is due.
	FlushDue() bool
	// Flush writes what is due; FlushAll writes everything held. Both return the checkpoints
	// written, for Kafka's copy.
	Flush(ctx context.Context) (Offsets, error)
	FlushAll(ctx context.Context) (Offsets, error)
	// Revoke writes and drops partitions ids; Lost drops them unwritten.
	Revoke(ctx context.Context, ids []int32) (Offsets, error)
	Lost(ids []int32)
}

// Group says which consumer group to join and how.
type Group struct {
	Brokers        []string
	Dial           []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options
	Name           string
	InstanceID     string // static membership when set
	SessionTimeout time.Duration
}

// Config is one stream's member.
type Config struct {
	Stream string   // names the stream in logs, errors and the metrics' stream label
	Topics []string // the stream's topics, all with the same partition count
	Group  Group
	// Balancers replace the group's default balancers when set.
	Balancers []kgo.GroupBalancer
	// Poll bounds how long one poll waits, so that flushes stay on time when the topics are idle.
	Poll time.Duration
	// Partitions, when set, is told the first topic's partition count before the first Assign.
	Partitions func(n int)
	// Halts records partitions halted because their checkpoint does not fit the log, and holds
	// the decisions that resume them.
	Halts  halt.Store
	Owner  string // names this process in halts
	Now    func() time.Time
	Logger *slog.Logger
	// Registry takes the member's metrics (labelled with the stream) and, with KafkaMetrics,
	// the Kafka client's.
	Registry     prometheus.Registerer
	KafkaMetrics bool
}

// Source consumes a stream's topics as a member of a consumer group and drives its Engine. It
// owns its Kafka client and the goroutine started by Start; Stop ends both after a last flush.
type Source struct {
	c      Config
	cl     *kgo.Client
	engine Engine
	logger *slog.Logger
	// running ends when Stop begins: it is the poll loop's context. It exists from NewSource
	// on, because the group may call back before Start.
	running context.Context
	cancel  context.CancelFunc
	stop    *stopping
	// clientSet is closed once cl is set: the group can assign partitions, and so call
	// adjustOffsets, which reads cl, before kgo.NewClient has returned it.
	clientSet chan struct{}
	done      chan struct{}
	err       error // why the loop ended; read after done is closed
	halts     halts
	sized     bool // Partitions was told
}

// NewSource joins the group.
func NewSource(c Config, engine Engine) (*Source, error) {
	s := &Source{c: c, engine: engine, logger: c.Logger.With("stream", c.Stream), clientSet: make(chan struct{})}
	s.running, s.cancel = context.WithCancel(context.Background())
	s.stop = newStopping()
	if err := s.halts.init(prometheus.WrapRegistererWith(prometheus.Labels{"stream": c.Stream}, c.Registry)); err != nil {
		return nil, fmt.Errorf("create %s consumer: %w", c.Stream, err)
	}
	var kreg prometheus.Registerer
	if c.KafkaMetrics {
		kreg = c.Registry
	}
	g := c.Group
	opts := append(append(append(kafka.ClientOptions(g.Brokers, "tally-aggregator-"+c.Stream, s.logger, kreg), g.Dial...),
		kafka.GroupTimeouts(g.SessionTimeout)...),
		kgo.ConsumerGroup(g.Name),
		kgo.ConsumeTopics(c.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.AdjustFetchOffsetsFn(s.adjustOffsets),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	)
	if len(c.Balancers) > 0 {
		opts = append(opts, kgo.Balancers(c.Balancers...))
	}
	if g.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(g.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create %s consumer: %w", c.Stream, err)
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
// on and none comes in; the leave's revoke writes the batches held and commits. What the leave
// did not write (it was cut short) is written once more, a static member leaves by instance id
// (the client's own leave does not), and the client closes. It gives up when ctx ends: what was
// not written, the next owner replays from the ClickHouse checkpoints.
func (s *Source) Stop(ctx context.Context) error {
	s.stop.leaving.Store(true)
	defer context.AfterFunc(ctx, s.stop.endLive)()
	s.cancel()
	<-s.done
	loopErr := s.err
	if errors.Is(loopErr, context.Canceled) {
		loopErr = nil
	}
	leaveErr := s.cl.LeaveGroupContext(ctx)
	if leaveErr != nil {
		leaveErr = fmt.Errorf("leave group %s: %w", s.c.Group.Name, leaveErr)
	}
	done, lastErr := s.engine.FlushAll(ctx)
	s.commit(ctx, done)
	kafka.LeaveStatic(ctx, s.cl, s.logger)
	s.stop.endLive()
	s.cl.Close()
	return errors.Join(loopErr, leaveErr, lastErr)
}

// Done is closed when the loop ends, on Stop or on its own (a write that could not finish).
func (s *Source) Done() <-chan struct{} { return s.done }

// Err is why the loop ended; valid once Done is closed.
func (s *Source) Err() error { return s.err }

// Check reports, for /readyz, whether the brokers answer and which partitions are halted.
func (s *Source) Check(ctx context.Context) error {
	if err := s.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return s.halts.err()
}

func (s *Source) run(ctx context.Context) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, s.c.Poll)
		fetches := s.cl.PollRecords(pctx, 50000)
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			s.cl.AllowRebalance()
			return ctx.Err()
		}
		err := s.step(ctx, fetches)
		s.cl.AllowRebalance()
		if err != nil {
			return err
		}
	}
}

// step applies one poll's records, claims again what the engine asks, resumes the halted
// partitions an operator decided on, and flushes when due; the group cannot rebalance meanwhile.
func (s *Source) step(ctx context.Context, fetches kgo.Fetches) error {
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.logger.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		}
	})
	fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
		s.engine.Process(ftp.Topic, ftp.Partition, ftp.Records)
	})
	if ids := s.engine.Reclaims(); len(ids) > 0 {
		if err := s.reclaim(ctx, ids); err != nil {
			return err
		}
	}
	s.resumeDecided(ctx)
	if !s.engine.FlushDue() {
		return nil
	}
	done, err := s.engine.Flush(ctx)
	if err != nil {
		return err
	}
	s.commit(ctx, done)
	s.refetch(s.engine.Dropped())
	return nil
}

// refetch moves the fetch position of partitions ids of every topic back to the offset last
// committed (the start without one). The client skips a partition it no longer consumes, so
// only a partition the group still assigns here is fetched again: a fence check can drop it
// after its last records were fetched, and with the producers quiet it would otherwise never be
// claimed again. Called from the poll loop, while no rebalance runs.
func (s *Source) refetch(ids []int32) {
	if len(ids) == 0 {
		return
	}
	committed := s.cl.CommittedOffsets()
	at := make(Offsets, len(s.c.Topics))
	for _, topic := range s.c.Topics {
		at[topic] = make(map[int32]int64, len(ids))
		for _, id := range ids {
			at[topic][id] = max(committed[topic][id].Offset, 0)
		}
	}
	s.cl.SetOffsets(epochOffsets(at))
	s.logger.Info("fetching again partitions a newer owner claimed; claimed back if still assigned here", "partitions", ids)
}

// reclaim claims ids again (they were dropped for a newer owner's claim, yet the group still
// assigns them here) and seeks each to where Assign says it resumes.
func (s *Source) reclaim(ctx context.Context, ids []int32) error {
	var resume Resume
	if err := retry.Do(ctx, 5*time.Second, func() error {
		var err error
		resume, err = s.engine.Assign(ctx, ids)
		return err
	}, func(err error, wait time.Duration) {
		s.logger.Warn("claim partitions again; retrying", "partitions", ids, "err", err, "backoff", wait)
	}); err != nil {
		return fmt.Errorf("claim %s partitions %v again: %w", s.c.Stream, ids, err)
	}
	s.cl.SetOffsets(epochOffsets(resume.At))
	s.logger.Warn("claimed partitions again that the group still assigns here", "partitions", ids)
	return nil
}

// commit records the checkpoints in Kafka too. ClickHouse holds the authoritative checkpoint;
// Kafka's copy serves lag monitoring and the fallback when ClickHouse has none, so an error here
// is logged, not fatal.
func (s *Source) commit(ctx context.Context, done Offsets) {
	if len(done) == 0 {
		return
	}
	s.cl.CommitOffsetsSync(ctx, epochOffsets(done),
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				s.logger.Warn("commit offsets to kafka", "err", err)
			}
		})
}

func epochOffsets(o Offsets) map[string]map[int32]kgo.EpochOffset {
	out := make(map[string]map[int32]kgo.EpochOffset, len(o))
	for topic, parts := range o {
		m := make(map[int32]kgo.EpochOffset, len(parts))
		for id, off := range parts {
			m[id] = kgo.EpochOffset{Epoch: -1, Offset: off}
		}
		out[topic] = m
	}
	return out
}

// adjustOffsets runs after the group assigned partitions and fetched Kafka's committed offsets:
// it has the engine claim them and load their state, checks each checkpoint against its log,
// and resumes at the checkpoint, or halts the partition.
func (s *Source) adjustOffsets(ctx context.Context, fetch map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	ctx, cancel := s.stop.until(ctx)
	defer cancel()
	if err := s.stop.refuse(); err != nil {
		return nil, fmt.Errorf("load %s partition state: %w", s.c.Stream, err)
	}
	select {
	case <-s.clientSet:
	case <-ctx.Done():
		return nil, fmt.Errorf("load %s partition state: %w", s.c.Stream, ctx.Err())
	}
	var resume Resume
	err := retry.Do(ctx, 5*time.Second, func() error {
		var err error
		resume, err = s.assign(ctx, partitionIDs(fetch, maps.Keys))
		return err
	}, func(err error, wait time.Duration) {
		s.logger.Warn("load partition state; retrying", "err", err, "backoff", wait)
	})
	if err != nil {
		return nil, fmt.Errorf("load %s partition state: %w", s.c.Stream, err)
	}
	if err := s.checkLogs(ctx, resume); err != nil {
		return nil, fmt.Errorf("check %s checkpoints against the log: %w", s.c.Stream, err)
	}
	for topic, parts := range fetch {
		for id := range parts {
			if off, ok := resume.At[topic][id]; ok {
				parts[id] = kgo.NewOffset().At(off).WithEpoch(-1)
			}
		}
	}
	return fetch, nil
}

// assign tells the engine the partition count first, once.
func (s *Source) assign(ctx context.Context, ids []int32) (Resume, error) {
	if s.c.Partitions != nil && !s.sized {
		n, err := kafka.Partitions(ctx, s.cl, s.c.Topics[0])
		if err != nil {
			return Resume{}, err
		}
		s.c.Partitions(n)
		s.sized = true
	}
	return s.engine.Assign(ctx, ids)
}

// partitionIDs is the union of the partition ids of every topic in m (ids lists those of one
// topic's), each once, sorted.
func partitionIDs[C any](m map[string]C, ids func(C) iter.Seq[int32]) []int32 {
	var out []int32
	for _, parts := range m {
		for id := range ids(parts) {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

func (s *Source) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	ctx, cancel := s.stop.until(ctx)
	defer cancel()
	s.unhalt(revoked)
	done, err := s.engine.Revoke(ctx, partitionIDs(revoked, slices.Values))
	if err != nil {
		s.logger.Error("write batches of revoked partitions; the next owner replays them", "err", err)
	}
	s.commit(ctx, done)
}

func (s *Source) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.unhalt(lost)
	s.engine.Lost(partitionIDs(lost, slices.Values))
}

// halts are the partitions this member holds halted. The poll loop, the group's callbacks and
// readiness checks all read them.
type halts struct {
	mu    sync.Mutex
	held  map[topicPartition]*halt.Halt
	gauge *prometheus.GaugeVec
	next  time.Time // when the poll loop next looks for decisions
}

type topicPartition struct {
	topic string
	id    int32
}
