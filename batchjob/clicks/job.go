// Package clicks is the nightly exact click job (batchjob clicks): it re-reads a day's raw
// clicks and every fraud verdict from the log (a Source: the Kafka topics, or the sink's files),
// deduplicates globally by click id (the first occurrence by event time counts, however far
// apart the repeats are), applies the latest verdict on each click, and writes the day's per-ad
// exact and billable counts to ClickHouse as a new version; `batchjob clicks audit` lists the
// clicks behind one ad's number, for disputes, and beside them the click and verdict records
// the streaming aggregator refused and set aside in dead_letters that day.
//
// Exactness: a click id counts once, on the day of its first occurrence, for that
// occurrence's ad. To recognize a repeat of a click counted the day before, the run also reads
// Lookback of clicks before the day (the longest a click id stays acceptable; signed ids carry
// their render time and the collector refuses older ones). Verdicts are every one in the log
// when the run reads it; one arriving later changes the numbers only through a rerun, which
// writes a new version. Memory holds one entry per distinct click id read (see
// docs/PERFORMANCE.md, "Nightly batch jobs"); a day beyond that needs the files source with ClickHouse doing the
// grouping.
//
// Concurrency and lifecycle: Run holds the Redis run lock LockKey (package runlock) for its
// whole duration, so two runs never number versions at once; the lock's renewer is the only
// goroutine, and it ends before Run returns. Audit reads only and takes no lock.
package clicks

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/batchjob/runlock"
	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/platform/progress"
)

// LockKey is the Redis key that lets one run of batchjob clicks at a time.
const LockKey = "batchjob:clicks:lock"

// Deps is what a run reads and writes.
type Deps struct {
	Source     Source
	ClickHouse driver.Conn           // database with the migrations applied
	Redis      redis.UniversalClient // for the run lock
	LockTTL    time.Duration
	Rules      Rules
	// Lookback is how long before the day the clicks are read to find repeats of earlier
	// days' clicks.
	Lookback time.Duration
	// Progress is given the click and verdict records to read (Source.Size) and counts them as
	// they are read (nil: not counted).
	Progress *progress.Meter
	Logger   *slog.Logger
	Now      func() time.Time
}

// Report is what one run read and wrote.
type Report struct {
	Date       time.Time // UTC midnight
	Version    uint32
	Source     string
	StartedAt  time.Time
	ComputedAt time.Time
	Read       logread.Stats // clicks and verdicts records read
	Tally      TallyStats
	Day        DayStats
}

// Summary is the one line the command prints.
func (r Report) Summary() string {
	took := r.ComputedAt.Sub(r.StartedAt)
	rate := 0.0
	if took > 0 {
		rate = float64(r.Read.Records) / took.Seconds()
	}
	return fmt.Sprintf("click report %s version %d: %d ads, %d clicks counted, %d billable, %d duplicates, %d not billed; read %d records (%s) in %s, %.0f records/s",
		r.Date.Format(time.DateOnly), r.Version, r.Day.Ads, r.Day.Exact, r.Day.Billable, r.Day.Duplicates, r.Day.Fraud,
		r.Read.Records, r.Source, took.Round(time.Millisecond), rate)
}

// Run computes day's counts and writes them as a new version. It fails with runlock.ErrLocked
// if another run holds the lock.
func Run(ctx context.Context, day time.Time, d Deps) (Report, error) {
	var rep Report
	err := runlock.Hold(ctx, d.Redis, LockKey, d.LockTTL, d.Logger, func(ctx context.Context) error {
		var err error
		rep, err = run(ctx, day, d)
		return err
	})
	return rep, err
}

func run(ctx context.Context, day time.Time, d Deps) (Report, error) {
	rep := Report{Date: DayOf(day), StartedAt: d.Now().UTC()}
	t, read, err := tally(ctx, rep.Date, d, "")
	rep.Source = d.Source.Name() // after the read: the files source says whether it needed Kafka
	if err != nil {
		return rep, err
	}
	rep.Read, rep.Tally = read, t.Stats()
	rows, by, st := t.Rows()
	rep.Day = st
	rep.ComputedAt = d.Now().UTC()
	if err := writeVersion(ctx, d.ClickHouse, &rep, rows, by); err != nil {
		return rep, err
	}
	return rep, nil
}

// tally reads the day's clicks (and the lookback before it), then the verdicts.
func tally(ctx context.Context, day time.Time, d Deps, audit string) (*Tally, logread.Stats, error) {
	t := NewTally(day, d.Rules, audit)
	from, to := day.Add(-d.Lookback), day.AddDate(0, 0, 1)
	count := func(int64) {}
	if d.Progress != nil {
		total, err := d.Source.Size(ctx, from, to)
		if err != nil {
			return nil, logread.Stats{}, fmt.Errorf("size the read of %s: %w", day.Format(time.DateOnly), err)
		}
		d.Progress.SetTotal(total)
		count = d.Progress.Add
	}
	cs, err := d.Source.Clicks(ctx, from, to, func(n int64, b []Click) error { t.AddClicks(b); count(n); return nil })
	if err != nil {
		return nil, logread.Stats{}, fmt.Errorf("read clicks of %s: %w", day.Format(time.DateOnly), err)
	}
	d.Logger.Info("clicks read", "records", cs.Records, "undecodable", cs.Undecodable, "in_range", t.Stats().Clicks,
		"click_ids", len(t.clicks), "ads", len(t.ads), "ad_campaign_devices", len(t.places))
	vs, err := d.Source.Verdicts(ctx, from, func(n int64, b []Verdict) error { t.AddVerdicts(b); count(n); return nil })
	if err != nil {
		return nil, logread.Stats{}, fmt.Errorf("read fraud verdicts for %s: %w", day.Format(time.DateOnly), err)
	}
	d.Logger.Info("verdicts read", "records", vs.Records, "undecodable", vs.Undecodable, "applied", t.Stats().VerdictsApplied)
	return t, logread.Stats{Records: cs.Records + vs.Records, Undecodable: cs.Undecodable + vs.Undecodable}, nil
}

// AuditReport is the audit of one ad's day: every occurrence of its clicks, what it recomputed
// from the log now, what the latest stored version says, and the records refused that day.
type AuditReport struct {
	Date       time.Time
	AdID       string
	Lines      []AuditLine
	Recomputed Row
	Stored     Row
	Version    uint32 // the latest complete version; 0 when the day has none
	// Rejected are the click and verdict records set aside in dead_letters on the day (by the
	// UTC day the aggregator first set them aside) whose payload names the ad or names no ad
	// (AdID ""): those may be the ad's too. RejectedOthers counts the ones naming other ads.
	Rejected       []Rejected
	RejectedOthers int
}

// Audit recomputes ad's day from the log and lists the clicks behind it, and the day's refused
// records that are or may be the ad's. It writes nothing.
func Audit(ctx context.Context, day time.Time, ad string, d Deps) (AuditReport, error) {
	ar := AuditReport{Date: DayOf(day), AdID: ad}
	t, _, err := tally(ctx, ar.Date, d, ad)
	if err != nil {
		return ar, err
	}
	ar.Lines = t.Audit()
	ar.Recomputed.AdID = ad
	for _, l := range ar.Lines {
		switch l.Status {
		case StatusCounted:
			ar.Recomputed.ExactCount++
			ar.Recomputed.BillableCount++
		case StatusFraud:
			ar.Recomputed.ExactCount++
		}
	}
	version, row, ok, err := storedRow(ctx, d.ClickHouse, ar.Date, ad)
	if err != nil {
		return ar, err
	}
	if ok {
		ar.Version, ar.Stored = version, row
	}
	if ar.Rejected, ar.RejectedOthers, err = rejectedOn(ctx, d.ClickHouse, ar.Date, ad); err != nil {
		return ar, err
	}
	return ar, nil
}
