package likes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/platform/retry"
)

// DefaultApplierGroup is the consumer group of the appliers.
const DefaultApplierGroup = "tally-likes-applier"

// ApplierConfig says where the applier reads.
type ApplierConfig struct {
	likestate.Log
	// InstanceID, if set, makes the applier a static group member: a process restarted with
	// the same id takes its partitions back at once instead of after the session timeout.
	InstanceID string
	// CheckEvery is how often the applier checks that Redis still holds the serving state.
	CheckEvery time.Duration
}

// InstanceID is a static group member id for the applier of the collector listening on
// listenAddr on this host: stable across restarts, distinct between collectors.
func InstanceID(listenAddr string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	// Kafka allows only [a-zA-Z0-9._-] in an instance id.
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, "tally-likes-applier-"+host+"-"+listenAddr)
}

// Applier keeps Redis equal to the log. As a consumer-group member (a likestate.Follower) it
// applies every record of the topic (idempotent by offset) that a request of this process did
// not already apply, and commits offsets only after applying, so a record that a request wrote
// to the log but could not apply (a crash, Redis down) is applied within about a second. Every
// CheckEvery, and at start, it checks likestate.ReadyKey; when Redis lost the state it rebuilds
// it from the whole log before likes are served again.
//
// Each batch also moves its partitions' applied marks (likestate.Mark), and every CheckEvery
// the applier checks the marks of the partitions it holds: a mark below where the applier (or,
// for a partition just assigned, the group's commit) left it means a Redis failover lost
// changes the old primary had acknowledged, the request path's included, and the applier reads
// the partition again from the mark. So lost changes come back within about CheckEvery.
type Applier struct {
	cfg        ApplierConfig
	store      *likestate.Store
	f          *likestate.Follower
	logger     *slog.Logger
	nextCheck  time.Time       // when ensureReady runs next
	nextVerify time.Time       // when verifyMarks runs next
	ready      bool            // what the last ensureReady found
	marks      map[int32]int64 // where this applier left each partition's mark
	// nextCheck, nextVerify, ready and marks are the Follower's goroutine's alone.

	applied, undecodable, rebuilds prometheus.Counter
	failures, rewinds              prometheus.Counter
}

// NewApplier joins cfg.Group; Start begins applying.
func NewApplier(cfg ApplierConfig, store *likestate.Store, logger *slog.Logger, reg prometheus.Registerer) (*Applier, error) {
	a := &Applier{
		cfg: cfg, store: store, logger: logger, marks: map[int32]int64{},
		applied:     prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_applier_records_total", Help: "Like records applied to Redis by the applier (rebuilds included)."}),
		undecodable: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_applier_undecodable_total", Help: "Like records skipped because they could not be decoded."}),
		rebuilds:    prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_rebuilds_total", Help: "Rebuilds of the like serving state from the log that completed."}),
		failures:    prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_applier_errors_total", Help: "Applier attempts that failed (Redis or Kafka unavailable) and were retried."}),
		rewinds:     prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_likes_applier_rewinds_total", Help: "Partitions read again because Redis lost applied changes (a failover to a replica behind the old primary)."}),
	}
	reg.MustRegister(a.applied, a.undecodable, a.rebuilds, a.failures, a.rewinds)
	opts := append(kafka.GroupTimeouts(10*time.Second), kgo.FetchMaxWait(250*time.Millisecond))
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	f, err := likestate.NewFollower(likestate.FollowConfig{
		Log: cfg.Log, ClientID: "tally-likes-applier",
		Client: opts, MaxBatch: 5000, Idle: cfg.CheckEvery,
	}, likestate.Handler{BeforePoll: a.checkReady, Handle: a.apply, AfterPoll: a.verifyMarks}, logger)
	if err != nil {
		return nil, fmt.Errorf("create likes applier: %w", err)
	}
	a.f = f
	return a, nil
}

// Start begins applying in a goroutine that runs until Stop.
func (a *Applier) Start() { a.f.Start() }

// Stop ends applying and leaves the group, within ctx. What was applied is committed already.
func (a *Applier) Stop(ctx context.Context) error { return a.f.Stop(ctx) }

// checkReady runs ensureReady at most every CheckEvery.
func (a *Applier) checkReady(ctx context.Context) {
	if time.Now().After(a.nextCheck) {
		a.ensureReady(ctx)
		a.nextCheck = time.Now().Add(a.cfg.CheckEvery)
	}
}

// apply applies b's records, also those a request applied already: applying one again changes
// nothing, and a Redis failover may have lost a request's change made after the applier's last
// mark while keeping that mark, which nothing but the log then shows. Undecodable records are
// skipped (and counted), as every reader skips them.
func (a *Applier) apply(ctx context.Context, b likestate.Batch) error {
	a.undecodable.Add(float64(len(b.Bad)))
	marks := a.marksOf(b)
	recs := b.Records
	var behind map[int32]int64
	err := a.retry(ctx, "apply like records", func() (err error) {
		behind, err = a.store.ApplyRecords(ctx, recs, marks)
		return err
	})
	if err != nil {
		return err // only ctx ends a retry
	}
	a.applied.Add(float64(len(recs)))
	a.rewind(behind)
	for _, m := range marks {
		if _, lost := behind[m.Partition]; !lost {
			a.marks[m.Partition] = m.End // the mark is at least there now
		}
	}
	return nil
}

// marksOf says where b leaves each of its partitions' marks, and where each should stand
// before it: where this applier left it, else the group's commit, else (a new group, or while
// the state is rebuilt and marks are being set up again) anywhere.
func (a *Applier) marksOf(b likestate.Batch) []likestate.Mark {
	ends := map[int32]int64{}
	for _, r := range b.Records {
		ends[r.Partition] = max(ends[r.Partition], r.Offset+1)
	}
	for _, r := range b.Bad {
		ends[r.Rec.Partition] = max(ends[r.Rec.Partition], r.Rec.Offset+1)
	}
	committed := a.f.Committed()
	marks := make([]likestate.Mark, 0, len(ends))
	for p, end := range ends {
		floor, ok := a.marks[p]
		if !ok {
			if floor, ok = committed[p]; !ok {
				floor = -1
			}
		}
		if !a.ready {
			floor = -1
		}
		marks = append(marks, likestate.Mark{Partition: p, Floor: floor, End: end})
	}
	return marks
}

// verifyMarks checks, at most every CheckEvery while the state is ready, that the marks of the
// partitions this applier holds are where it left them (or, not yet handled here, at least at
// the group's commit), and reads the partitions found behind again.
func (a *Applier) verifyMarks(ctx context.Context) {
	if !a.ready || time.Now().Before(a.nextVerify) {
		return
	}
	a.nextVerify = time.Now().Add(a.cfg.CheckEvery)
	floors := a.f.Committed()
	for p := range a.marks {
		if _, held := floors[p]; !held {
			delete(a.marks, p) // moved to another member
		}
	}
	for p, m := range a.marks {
		floors[p] = m
	}
	behind, err := a.store.Behind(ctx, floors)
	if err != nil {
		a.failures.Inc()
		a.logger.Warn("likes applier cannot check its applied marks", "err", err)
		return
	}
	a.rewind(behind)
}

// rewind reads each partition of behind again from the mark found there, and expects the mark
// there from now on.
func (a *Applier) rewind(behind map[int32]int64) {
	if len(behind) == 0 {
		return
	}
	for p, mark := range behind {
		a.logger.Warn("redis lost applied like changes (a failover?); applying the log again from the partition's mark",
			"topic", a.cfg.Topic, "partition", p, "mark", mark, "left_at", a.marks[p])
		a.marks[p] = mark
		a.rewinds.Inc()
	}
	a.f.Rewind(behind)
}

// ensureReady rebuilds the serving state if Redis lost it. A Redis that is down is left to
// the next check: requests answer 503 meanwhile anyway.
func (a *Applier) ensureReady(ctx context.Context) {
	ready, err := a.store.Ready(ctx)
	if err != nil {
		a.failures.Inc()
		a.logger.Warn("likes applier cannot reach redis", "err", err)
		return
	}
	if a.ready = ready; ready {
		return
	}
	_ = a.retry(ctx, "rebuild like state", func() error { return a.rebuild(ctx) })
}

// errLeaseLost restarts a rebuild whose lease was lost.
var errLeaseLost = errors.New("like state rebuild lease lost")

// rebuild applies the whole log to Redis, then marks the state ready, holding the rebuild lease
// throughout. If the lease is lost meanwhile (Redis emptied again mid-rebuild) it starts over;
// if another applier holds it, it leaves the rebuild to that one and checks again later.
// Records written after the snapshot are applied by the group loop, which resumes from its
// committed offsets, all of them at or below the snapshot (the loop was not consuming during
// the rebuild).
func (a *Applier) rebuild(ctx context.Context) error {
	for {
		t0 := time.Now()
		held, mine, err := a.store.BeginRebuild(ctx)
		if err != nil {
			return err
		}
		if !mine {
			a.logger.Info("another applier is rebuilding the like state; waiting for it")
			return nil
		}
		a.logger.Warn("like serving state missing in redis; rebuilding it from the log", "topic", a.cfg.Topic)
		snap, stats, err := likestate.Replay(ctx, a.cfg.Brokers, a.cfg.Topic, a.logger, func(recs []likestate.Record) error {
			for i := 0; i < len(recs); i += 2000 {
				chunk := recs[i:min(i+2000, len(recs))]
				if _, err := a.store.ApplyRecords(ctx, chunk, nil); err != nil {
					return err
				}
				a.applied.Add(float64(len(chunk)))
			}
			ok, err := held.Renew(ctx)
			if err == nil && !ok {
				err = errLeaseLost
			}
			return err
		}, a.cfg.Dial...)
		if errors.Is(err, errLeaseLost) {
			a.logger.Warn("like serving state lost again during the rebuild; starting over")
			continue
		}
		if err != nil {
			return fmt.Errorf("rebuild like state from %s: %w", a.cfg.Topic, err)
		}
		a.undecodable.Add(float64(stats.Undecodable))
		done, err := a.store.FinishRebuild(ctx, held, snap)
		if err != nil {
			return err
		}
		if done {
			a.rebuilds.Inc()
			a.logger.Info("like serving state rebuilt from the log", "records", stats.Records,
				"partitions", len(snap), "took", time.Since(t0).Round(time.Millisecond))
			return nil
		}
		a.logger.Warn("like serving state lost again during the rebuild; starting over")
	}
}

func (a *Applier) retry(ctx context.Context, what string, fn func() error) error {
	err := retry.Do(ctx, 2*time.Second, fn, func(err error, wait time.Duration) {
		a.failures.Inc()
		a.logger.Warn("likes applier step failed; retrying", "step", what, "err", err, "backoff", wait)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
