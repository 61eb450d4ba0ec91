// Package reconcile is the nightly like job (batchjob likes): it rebuilds exact like state
// from the like log, the source of truth, compares the two derived stores with it (Redis
// serving state: membership per pair and totals; ClickHouse like records, read FINAL), repairs
// the drift it finds, and writes a versioned report to ClickHouse.
//
// The log is read from its start up to end offsets snapshotted first, and the last record of
// each (item, user) pair in log order is its state. When the sink's store holds files of the
// topic, the log is read from them and from Kafka beyond them (log_files.go): the files keep
// likes longer than Kafka may. Pairs changed after the snapshot (their
// stored offset is at or above the snapshot's end) are newer than what the job knows: they are
// neither counted as drift nor touched by repairs, and the next run checks them.
//
// Concurrency and lifecycle: Run holds a Redis lock (LockKey, package runlock) for its whole
// duration, so two copies never repair or version reports at once; the lock's refresher is the
// only goroutine, and it ends before Run returns.
package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/batchjob/runlock"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

// Deps is what a run reads and writes.
type Deps struct {
	Brokers []string
	Dial    []kgo.Opt // connection options (TLS, SASL) from kafka.Security.Options
	Topic   string
	// Files is the sink's store; when it holds the topic's files the log is read from them and
	// from Kafka beyond them (replayFiles), else from Kafka alone.
	Files      store.Store
	SinkGroup  string                // the sink's consumer group (sink.group), whose commits say which flushes are complete
	ClickHouse driver.Conn           // database with the migrations applied
	Store      *likestate.Store      // the like serving state
	Redis      redis.UniversalClient // for the run lock
	LockTTL    time.Duration
	// Progress counts the log records read (nil: not counted).
	Progress *progress.Meter
	Logger   *slog.Logger
	Now      func() time.Time
}

// Report is what one run found and did.
type Report struct {
	Version      uint64
	StartedAt    time.Time
	FinishedAt   time.Time
	Scope        string
	Source       string // "kafka", "parquet" or "parquet+kafka": where the log was read
	Records      int64  // log records read
	ItemsChecked uint64
	Differences  uint64 // diff rows: (item, source) pairs that disagreed with the log
	Repaired     uint64 // of those, repaired
	Diffs        []Diff
}

// Summary is the one line the command prints.
func (r Report) Summary() string {
	return fmt.Sprintf("like reconciliation version %d scope %s: %d records from %s, %d items checked, %d differences, %d repaired, took %s",
		r.Version, r.Scope, r.Records, r.Source, r.ItemsChecked, r.Differences, r.Repaired, r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond))
}

// Diff is one item whose state in one store disagreed with the log. Expected and Actual are
// like totals over the pairs compared; Pairs is how many pairs disagreed.
type Diff struct {
	ItemID   string
	Source   string // "redis" or "clickhouse"
	Expected int64
	Actual   int64
	Pairs    int
	Repaired bool
}

// LockKey is the Redis key that lets one run of batchjob likes at a time.
const LockKey = "batchjob:likes:lock"

// Run checks and repairs the job's scope and writes the report. It fails with
// runlock.ErrLocked if another run holds the lock.
func Run(ctx context.Context, job Job, d Deps) (Report, error) {
	var rep Report
	err := runlock.Hold(ctx, d.Redis, LockKey, d.LockTTL, d.Logger, func(ctx context.Context) error {
		var err error
		rep, err = run(ctx, job, d)
		return err
	})
	return rep, err
}

func run(ctx context.Context, job Job, d Deps) (Report, error) {
	rep := Report{StartedAt: d.Now().UTC(), Scope: job.Scope()}
	st, err := readLog(ctx, d, job)
	if err != nil {
		return rep, err
	}
	rep.Records, rep.Source = st.records, st.source
	items := st.scope(job)
	rep.ItemsChecked = uint64(len(items))
	d.Logger.Info("like log read", "records", st.records, "pairs", st.pairs(), "items_in_scope", len(items))

	redisDiffs, err := checkRedis(ctx, d, st, items)
	if err != nil {
		return rep, err
	}
	chDiffs, err := checkClickHouse(ctx, d, st, items)
	if err != nil {
		return rep, err
	}
	rep.Diffs = append(redisDiffs, chDiffs...)
	for _, df := range rep.Diffs {
		rep.Differences++
		if df.Repaired {
			rep.Repaired++
		}
	}
	rep.FinishedAt = d.Now().UTC()
	if rep.Version, err = writeReport(ctx, d.ClickHouse, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// record is the last record of a pair below the snapshot.
type record struct {
	liked  bool
	offset int64
	ts     int64 // the change's time (Unix ms), as the record carries it
}

// logState is the log up to the snapshot: every pair's last record, and where each item lives.
type logState struct {
	snap      likestate.Snapshot
	last      map[string]map[string]record // item -> user -> last record
	partition map[string]int32             // item -> its partition (all its records are there)
	onDate    map[string]bool              // items with a record on the job's date
	records   int64
	source    string
}

func readLog(ctx context.Context, d Deps, job Job) (*logState, error) {
	st := &logState{last: map[string]map[string]record{}, partition: map[string]int32{}, onDate: map[string]bool{}}
	apply := func(recs []likestate.Record) error {
		if d.Progress != nil {
			d.Progress.Add(int64(len(recs)))
		}
		for _, r := range recs {
			users := st.last[r.Like.ItemID]
			if users == nil {
				users = map[string]record{}
				st.last[r.Like.ItemID] = users
				st.partition[r.Like.ItemID] = r.Partition
			}
			users[r.Like.UserID] = record{liked: r.Like.Liked, offset: r.Offset, ts: r.Like.TS}
			if !job.All && job.covers(r.Like.TS) {
				st.onDate[r.Like.ItemID] = true
			}
		}
		return nil
	}
	files := false
	if d.Files != nil {
		first, _, err := rawlog.Days(ctx, d.Files, d.Topic)
		if err != nil {
			return nil, fmt.Errorf("look for the sink's %s files: %w", d.Topic, err)
		}
		files = !first.IsZero()
	}
	var snap likestate.Snapshot
	var stats logread.Stats
	var err error
	st.source = "kafka"
	if files {
		var tail bool
		snap, stats, tail, err = replayFiles(ctx, d, d.Files, apply)
		st.source = "parquet"
		if tail {
			st.source = "parquet+kafka"
		}
	} else {
		var starts map[int32]int64
		if snap, starts, err = likestate.TakeSnapshot(ctx, d.Brokers, d.Topic, d.Logger, d.Dial...); err == nil {
			d.setTotal(snap, starts)
			stats, err = likestate.ReplayRange(ctx, d.Brokers, d.Topic, d.Logger, starts, snap, apply, d.Dial...)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read like log %s: %w", d.Topic, err)
	}
	st.snap, st.records = snap, stats.Records
	return st, nil
}

// setTotal gives the progress meter the records to read: each partition's offsets from first
// up to the snapshot (an estimate should the log ever hold gaps).
func (d Deps) setTotal(snap likestate.Snapshot, first map[int32]int64) {
	if d.Progress == nil {
		return
	}
	var total int64
	for p, end := range snap {
		if f, ok := first[p]; ok && end > f {
			total += end - f
		}
	}
	d.Progress.SetTotal(total)
}

// scope lists the items the job checks, sorted.
func (st *logState) scope(job Job) []string {
	var items []string
	for it := range st.last {
		if job.All || st.onDate[it] {
			items = append(items, it)
		}
	}
	sort.Strings(items)
	return items
}

func (st *logState) pairs() int {
	n := 0
	for _, users := range st.last {
		n += len(users)
	}
	return n
}

// observed is a pair as a store holds it: liked, and the offset of the record it reflects
// (has false when the store has nothing for the pair).
type observed struct {
	liked  bool
	offset int64
	has    bool
}

// comparison is one item's result: totals over the pairs compared, and the pairs that differ.
type comparison struct {
	expected, actual int64
	drift            []string // users, sorted
}

// compare checks one item's pairs in a store against the log. end is the snapshot's end offset
// of the item's partition: a pair the store holds at or above it changed after the snapshot
// and is skipped. exactRecord also requires the store to hold the log's last record itself
// (ClickHouse stores records); otherwise only the liked state counts (Redis serves state).
func compare(log map[string]record, got map[string]observed, end int64, exactRecord bool) comparison {
	var c comparison
	check := func(user string) {
		o := got[user]
		if o.has && o.offset >= end {
			return
		}
		r, inLog := log[user]
		want := inLog && r.liked
		if want {
			c.expected++
		}
		if o.liked {
			c.actual++
		}
		differs := o.liked != want
		if exactRecord {
			differs = differs || o.has != inLog || (inLog && o.offset != r.offset)
		}
		if differs {
			c.drift = append(c.drift, user)
		}
	}
	for user := range log {
		check(user)
	}
	for user := range got {
		if _, inLog := log[user]; !inLog {
			check(user)
		}
	}
	sort.Strings(c.drift)
	return c
}

// batches calls fn with items in slices of at most n.
func batches(items []string, n int, fn func([]string) error) error {
	for i := 0; i < len(items); i += n {
		if err := fn(items[i:min(i+n, len(items))]); err != nil {
			return err
		}
	}
	return nil
}
