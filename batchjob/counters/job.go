// Package counters is the nightly recount of the generic counters (batchjob counters): for one
// namespace, or every eventual and accurate one, it replays the counter_events log once with the
// aggregators' rule (package dedupe per partition and window length; a clear sets a counter to
// zero at its place in the log) and writes each counter's day, its end-of-day count and the
// stream's stored one beside it, as a new version of the namespace's report for the day
// (migration 019).
//
// Exactness: the end of day starts from the stream's stored total before the day (the log may
// no longer hold earlier days), so the recount checks the day, not the history before it. The
// log is read from the longest idempotency window of the namespaces, its grace and an hour of clock skew
// before the day (so a repeat of an add counted the day before is known) to the end of the log
// when the run starts, so an add stamped on the day and produced later is in. A token seen
// first before that stretch, or an add produced before it with a time stamped on the day, is
// not known to the run; the stream and the recount then differ and the report says so. Memory
// holds the dedupe state of every record read (about 40 bytes per token) and one entry per
// counter touched on the day.
//
// Concurrency and lifecycle: Run holds the Redis run lock LockKey (package runlock) for its
// whole duration, so two runs never number versions at once; the lock's renewer is the only
// goroutine, and it ends before Run returns.
package counters

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/batchjob/runlock"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/schemas"
)

// LockKey is the Redis key that lets one run of batchjob counters at a time.
const LockKey = "batchjob:counters:lock"

// skew is how far a record's produce time may lie before its event time and still be read: the
// hosts' clocks, not a client's choice of event_time.
const skew = time.Hour

// ErrNotLogged: the namespace is not one whose adds go through the log.
var ErrNotLogged = errors.New("namespace does not log its adds")

// Deps is what a run reads and writes.
type Deps struct {
	Log        logread.Reader
	Topic      string                // schemas.TopicCounterEvents but in tests
	ClickHouse driver.Conn           // database with the migrations applied
	Redis      redis.UniversalClient // for the run lock
	LockTTL    time.Duration
	// Progress is given the records to read and counts them as they are read (nil: not
	// counted).
	Progress *progress.Meter
	Logger   *slog.Logger
	Now      func() time.Time
}

// Report is what one run wrote for one namespace.
type Report struct {
	Namespace  string
	Generation uint64
	Date       time.Time // UTC midnight
	Version    uint32
	StartedAt  time.Time
	ComputedAt time.Time
	Read       logread.Stats // of the whole run, every namespace's records
	Counters   int
	Adds       int64
	Clears     uint64
	Duplicates uint64
	Differing  []Row // the counters whose recount and stored count differ
}

// Summary is the one line the command prints for the namespace.
func (r Report) Summary() string {
	took := r.ComputedAt.Sub(r.StartedAt)
	return fmt.Sprintf("counter report %s %s version %d: %d counters, %d differ from the stream, %d added, %d clears, %d duplicates; read %d records (%d undecodable) in %s",
		r.Namespace, r.Date.Format(time.DateOnly), r.Version, r.Counters, len(r.Differing), r.Adds, r.Clears, r.Duplicates,
		r.Read.Records, r.Read.Undecodable, took.Round(time.Millisecond))
}

// Run recounts namespace ns on day, or every eventual and accurate namespace when ns is "",
// reading the log once, and writes each namespace's report as a new version. It fails with
// runlock.ErrLocked if another run holds the lock, and with ErrNotLogged when ns is a
// best_effort namespace.
func Run(ctx context.Context, ns string, day time.Time, d Deps) ([]Report, error) {
	var reps []Report
	err := runlock.Hold(ctx, d.Redis, LockKey, d.LockTTL, d.Logger, func(ctx context.Context) error {
		var err error
		reps, err = run(ctx, ns, day, d)
		return err
	})
	return reps, err
}

func run(ctx context.Context, name string, day time.Time, d Deps) ([]Report, error) {
	started, day := d.Now().UTC(), day.UTC().Truncate(24*time.Hour)
	nss, err := loggedNamespaces(ctx, d.ClickHouse, name)
	if err != nil || len(nss) == 0 {
		return nil, err
	}
	gens := map[string]uint64{}
	var window time.Duration
	for _, ns := range nss {
		gens[ns.Name] = ns.Generation
		window = max(window, ns.IdempotencyWindow)
	}
	replay := NewReplay(gens, day)
	if err := readLog(ctx, day.Add(-window-schemas.CounterGrace*time.Millisecond-skew), replay, d); err != nil {
		return nil, err
	}
	reps := make([]Report, 0, len(nss))
	for _, ns := range nss {
		rep := Report{Namespace: ns.Name, Generation: ns.Generation, Date: day, StartedAt: started, Read: replay.Stats()}
		stored, err := storedTotals(ctx, d.ClickHouse, ns.Name, ns.Generation, day, replay.Names(ns.Name))
		if err != nil {
			return reps, err
		}
		rows := replay.Rows(ns.Name, stored)
		rep.Counters = len(rows)
		for _, r := range rows {
			rep.Adds += r.Adds
			rep.Clears += uint64(r.Clears)
			rep.Duplicates += r.Duplicates
			if r.Differs() {
				rep.Differing = append(rep.Differing, r)
			}
		}
		rep.ComputedAt = d.Now().UTC()
		d.Logger.Info("writing counter report", "ns", ns.Name, "date", day.Format(time.DateOnly), "counters", len(rows), "differing", len(rep.Differing))
		if err := writeVersion(ctx, d.ClickHouse, &rep, rows); err != nil {
			return reps, err
		}
		for _, r := range rep.Differing[:min(len(rep.Differing), 20)] {
			d.Logger.Warn("counter differs from the stream", "ns", ns.Name, "name", r.Name, "recount", r.Count, "stored", r.Stored,
				"before", r.Before, "adds", r.Adds, "clears", r.Clears)
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// loggedNamespaces returns namespace name, or every eventual and accurate namespace when name is
// "", sorted by name.
func loggedNamespaces(ctx context.Context, conn driver.Conn, name string) ([]counters.Namespace, error) {
	all, err := counters.Store{Conn: conn}.All(ctx)
	if err != nil {
		return nil, err
	}
	if name != "" {
		ns, ok := all[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("namespace %s does not exist (or was deleted)", name)
		case !ns.Mode.Logged():
			return nil, fmt.Errorf("namespace %s is %s: its counts live in Redis alone: %w", name, ns.Mode, ErrNotLogged)
		}
		return []counters.Namespace{ns}, nil
	}
	var out []counters.Namespace
	for _, ns := range all {
		if ns.Mode.Logged() {
			out = append(out, ns)
		}
	}
	slices.SortFunc(out, func(a, b counters.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// readLog feeds replay every record produced from since to the end of the log now.
func readLog(ctx context.Context, since time.Time, replay *Replay, d Deps) error {
	spans, err := d.Log.Spans(ctx, d.Topic, since.UnixMilli(), -1)
	if err != nil {
		return fmt.Errorf("find the log of %s since %s: %w", d.Topic, since.Format(time.RFC3339), err)
	}
	for p, sp := range spans {
		if !sp.TimeCut && sp.Start > 0 {
			d.Logger.Warn("the log starts after the read's start (removed by retention?): adds and tokens before it are unknown to the recount",
				"topic", d.Topic, "partition", p, "log_start", sp.Start, "since", since)
		}
	}
	count := func(int64) {}
	if d.Progress != nil {
		d.Progress.SetTotal(logread.Records(spans))
		count = d.Progress.Add
	}
	_, err = d.Log.Read(ctx, d.Topic, spans, func(recs []*kgo.Record) error {
		for _, r := range recs {
			replay.Apply(r.Partition, r.Value)
		}
		count(int64(len(recs)))
		return nil
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", d.Topic, err)
	}
	return nil
}
