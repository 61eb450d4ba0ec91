// Package writes runs a stream engine's ClickHouse steps until they succeed, with backoff, and
// keeps whether they do for readiness: while every attempt fails, counting has stopped and the
// records pile up as lag, and /readyz says so with the step and the error. On every
// FailingAfter-th failure in a row it runs the migrations' schema check, so that a table dropped
// behind their back (recorded as applied) does not fail every write until a restart.
//
// A Tracker is safe for concurrent use: a flush runs steps from more than one goroutine, and
// readiness checks read it meanwhile. It has its own lock because a flush holds its engine's for
// as long as it retries.
package writes

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/platform/retry"
	"github.com/tallypipeline/tally/schemas/migrate"
)

// FailingAfter is how many attempts in a row must fail before readiness reports the stream
// down: a single failed write is retried within 100 ms and is no news.
const FailingAfter = 3

// maxBackoff bounds the wait between attempts.
const maxBackoff = 5 * time.Second

// Config says what a Tracker reports to.
type Config struct {
	Conn   driver.Conn // for the schema check
	Now    func() time.Time
	Logger *slog.Logger
	Errors prometheus.Counter // every failed attempt
	// Steps, when set, times every step by its name, retries included.
	Steps *prometheus.HistogramVec
}

// Tracker runs steps and tracks their health.
type Tracker struct {
	c        Config
	mu       sync.Mutex
	lastOK   time.Time
	failures int       // attempts failed in a row
	since    time.Time // first failure of the run
	lastErr  error
}

// New returns a Tracker whose last success is now.
func New(c Config) *Tracker {
	return &Tracker{c: c, lastOK: c.Now()}
}

// Do runs fn, the step named what, until it succeeds or ctx ends.
func (t *Tracker) Do(ctx context.Context, what string, fn func() error) error {
	return t.DoAt(ctx, what, t.c.Now, fn)
}

// DoAt is Do recording its health at the times at gives (a goroutine of a flush records at the
// flush's time rather than call the clock beside it).
func (t *Tracker) DoAt(ctx context.Context, what string, at func() time.Time, fn func() error) error {
	if t.c.Steps != nil {
		defer prometheus.NewTimer(t.c.Steps.WithLabelValues(what)).ObserveDuration()
	}
	err := retry.Do(ctx, maxBackoff, fn, func(err error, wait time.Duration) {
		t.c.Errors.Inc()
		t.Failed(at(), fmt.Errorf("%s: %w", what, err))
		t.repairSchema(ctx)
		t.c.Logger.Warn("clickhouse step failed; retrying", "step", what, "err", err, "backoff", wait)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	t.Succeeded(at())
	return nil
}

// Succeeded records a step that succeeded at now.
func (t *Tracker) Succeeded(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastOK, t.failures, t.lastErr = now, 0, nil
}

// Failed records a step that failed at now with err.
func (t *Tracker) Failed(now time.Time, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failures == 0 {
		t.since = now
	}
	t.failures++
	t.lastErr = err
}

// Check reports an error, for readiness, while FailingAfter or more attempts in a row failed,
// naming how long and why.
func (t *Tracker) Check(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failures < FailingAfter {
		return nil
	}
	now := t.c.Now()
	return fmt.Errorf("%d clickhouse attempts failed in a row over %s (last success %s ago): %v",
		t.failures, now.Sub(t.since).Round(time.Second), now.Sub(t.lastOK).Round(time.Second), t.lastErr)
}

// repairSchema runs the schema check on every FailingAfter-th failure in a row. A check that
// finds everything in place changes nothing; one that cannot run (ClickHouse down) is left for
// the next round.
func (t *Tracker) repairSchema(ctx context.Context) {
	t.mu.Lock()
	n := t.failures
	t.mu.Unlock()
	if n%FailingAfter != 0 {
		return
	}
	if repaired, err := migrate.Repair(ctx, t.c.Conn, t.c.Logger); err != nil {
		t.c.Logger.Debug("schema check after failed writes", "err", err)
	} else if len(repaired) > 0 {
		t.c.Logger.Warn("re-created missing schema objects after failed writes", "objects", repaired)
	}
}
