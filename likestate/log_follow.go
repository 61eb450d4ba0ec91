package likestate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
)

// commitTimeout bounds the commit of a handled batch, which outlives a Stop.
const commitTimeout = 10 * time.Second

// Log names the likes log a reader follows and the consumer group it reads it in: each reader
// of the log (the ClickHouse loader, the Redis applier) embeds it in its configuration.
type Log struct {
	Brokers []string
	Dial    []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options
	Topic   string    // schemas.TopicLikes in production; tests use their own
	Group   string
}

// FollowConfig says which likes log a Follower reads, as which consumer-group member, and how
// it hands the records over.
type FollowConfig struct {
	Log
	ClientID string    // names the reader to the brokers ("tally-likes-loader")
	Client   []kgo.Opt // further client options: fetch wait, session timeouts, a static instance id
	MaxBatch int       // most records handed over at once
	// Linger is how long the first record waiting is held for more to join its batch; 0 hands
	// over what every poll brings.
	Linger time.Duration
	// Idle is the longest a poll waits while no record is held, so the longest between two runs
	// of Handler.BeforePoll.
	Idle time.Duration
}

// Batch is what a Follower hands over: records of the log in log order within each partition.
type Batch struct {
	Records []Record    // the records that decode and validate
	Bad     []BadRecord // the others, which every reader of the log skips alike
}

// BadRecord is a record of the likes log that does not decode or validate (schemas.DecodeLike).
type BadRecord struct {
	Rec *kgo.Record
	Err error
}

// Handler is what a Follower does with the log.
type Handler struct {
	// BeforePoll, if set, runs before every poll, between batches, with no record held.
	BeforePoll func(ctx context.Context)
	// Handle takes one batch. It fails only when ctx ends (it retries what else fails), and a
	// batch's offsets are committed only after it succeeded.
	Handle func(ctx context.Context, b Batch) error
	// AfterPoll, if set, runs after every poll once its records are handled, while no
	// rebalance can run: it and Handle may call Rewind.
	AfterPoll func(ctx context.Context)
}

// Follower reads the likes log as a member of a consumer group from the group's committed
// offsets (a new group from the log start), hands the records to its Handler in batches and
// commits each batch's offsets once handled, so that a crash or a partition's move replays at
// most the batches not yet handled. Rebalances wait until the batch in hand is handled and
// committed. It owns its client and one goroutine, from Start until Stop.
type Follower struct {
	cfg    FollowConfig
	h      Handler
	cl     *kgo.Client
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// NewFollower joins cfg.Group; Start begins reading.
func NewFollower(cfg FollowConfig, h Handler, logger *slog.Logger) (*Follower, error) {
	cl, err := kgo.NewClient(append(append(append(kafka.ClientOptions(cfg.Brokers, cfg.ClientID, logger, nil), cfg.Dial...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	), cfg.Client...)...)
	if err != nil {
		return nil, fmt.Errorf("create %s consumer of %s: %w", cfg.ClientID, cfg.Topic, err)
	}
	return &Follower{cfg: cfg, h: h, cl: cl, logger: logger}, nil
}

// Start begins reading in a goroutine that runs until Stop.
func (f *Follower) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.done = make(chan struct{})
	go func() {
		defer close(f.done)
		f.run(ctx)
	}()
}

// Stop ends reading, leaves the group (also as a static member, kafka.LeaveStatic) and closes
// the client, within ctx. A batch already handled is committed first; records held or being
// handled are not, and whoever reads their partitions next reads them again.
func (f *Follower) Stop(ctx context.Context) error {
	f.cancel()
	select {
	case <-f.done:
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", f.cfg.ClientID, ctx.Err())
	}
	kafka.LeaveStatic(ctx, f.cl, f.logger)
	f.cl.Close()
	return nil
}

// run polls until ctx ends, holding records for up to Linger (or MaxBatch of them) per batch:
// a busy topic must not turn into a batch per poll when each batch has a fixed cost.
func (f *Follower) run(ctx context.Context) {
	var held []*kgo.Record
	first := time.Now() // when the first record held arrived
	for {
		wait := f.cfg.Idle
		if len(held) > 0 {
			wait = max(f.cfg.Linger-time.Since(first), time.Millisecond)
		} else if f.h.BeforePoll != nil {
			f.h.BeforePoll(ctx)
		}
		var ok bool
		if held, ok = f.poll(ctx, held, wait); !ok {
			f.cl.AllowRebalance()
			return
		}
		if len(held) > 0 && (len(held) >= f.cfg.MaxBatch || time.Since(first) >= f.cfg.Linger) {
			if err := f.h.Handle(ctx, decode(held)); err != nil {
				f.cl.AllowRebalance()
				return // only ctx ends a Handle
			}
			f.commit(ctx, held)
			held = held[:0]
		}
		if len(held) == 0 {
			first = time.Now()
			if f.h.AfterPoll != nil {
				f.h.AfterPoll(ctx)
			}
		}
		f.cl.AllowRebalance()
	}
}

// Rewind makes the follower read each partition of offsets again from its offset (an offset
// before the log start reads from the start). Only Handle and AfterPoll may call it: it must
// not race a rebalance. Records of those partitions already fetched are dropped, and a
// partition this member no longer consumes is skipped.
func (f *Follower) Rewind(offsets map[int32]int64) {
	set := make(map[int32]kgo.EpochOffset, len(offsets))
	for p, off := range offsets {
		set[p] = kgo.EpochOffset{Epoch: -1, Offset: max(off, 0)}
	}
	f.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{f.cfg.Topic: set})
}

// Committed returns the group's committed offsets of the partitions this member consumes.
func (f *Follower) Committed() map[int32]int64 {
	out := map[int32]int64{}
	for p, eo := range f.cl.CommittedOffsets()[f.cfg.Topic] {
		out[p] = eo.Offset
	}
	return out
}

// commit commits the offsets of a handled batch. A Stop arriving meanwhile waits for it (up to
// commitTimeout), so that a graceful stop does not hand the batch over again to the next reader;
// a commit that fails anyway is harmless, the records are handled again later.
func (f *Follower) commit(ctx context.Context, handled []*kgo.Record) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := f.cl.CommitRecords(cctx, handled...); err != nil {
		f.logger.Warn("commit like log offsets", "client", f.cfg.ClientID, "err", err)
	}
}

// poll waits up to wait for records beyond those held, up to MaxBatch in all, and appends them
// to held; false once ctx ended or the client closed.
func (f *Follower) poll(ctx context.Context, held []*kgo.Record, wait time.Duration) ([]*kgo.Record, bool) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	fetches := f.cl.PollRecords(pctx, f.cfg.MaxBatch-len(held))
	cancel()
	if ctx.Err() != nil || fetches.IsClientClosed() {
		return held, false
	}
	fetches.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			f.logger.Warn("like log fetch error", "client", f.cfg.ClientID, "topic", t, "partition", p, "err", err)
		}
	})
	return append(held, fetches.Records()...), true
}

// decode splits recs into the likes that decode and validate and the bad records.
func decode(recs []*kgo.Record) Batch {
	b := Batch{Records: make([]Record, 0, len(recs))}
	for _, r := range recs {
		l, err := schemas.DecodeLike(r.Value)
		if err != nil {
			b.Bad = append(b.Bad, BadRecord{Rec: r, Err: err})
			continue
		}
		b.Records = append(b.Records, Record{Partition: r.Partition, Offset: r.Offset, Like: l})
	}
	return b
}
