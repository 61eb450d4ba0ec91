package views

import (
	"context"
	"fmt"
	"sync"
	"time"

	"tally/schemas/migrate"
)

// failingAfter is how many ClickHouse attempts in a row must fail before readiness reports the
// aggregator down: a single failed write is retried within 100 ms and is no news.
const failingAfter = 3

// progress tracks whether the aggregator's ClickHouse work succeeds, for readiness. It has its
// own lock because a flush holds the aggregator's for as long as it retries.
type progress struct {
	mu       sync.Mutex
	lastOK   time.Time
	failures int       // attempts failed in a row
	since    time.Time // first failure of the run
	lastErr  error
}

func (p *progress) succeeded(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastOK, p.failures, p.lastErr = now, 0, nil
}

func (p *progress) failed(now time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures == 0 {
		p.since = now
	}
	p.failures++
	p.lastErr = err
}

// Check reports an error while the aggregator's ClickHouse writes (or its loads of partition
// state) keep failing: counting has stopped and views pile up as lag. It names how long and why.
func (a *Aggregator) Check(context.Context) error {
	p := &a.progress
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures < failingAfter {
		return nil
	}
	now := a.now()
	return fmt.Errorf("%d clickhouse attempts failed in a row over %s (last success %s ago): %v",
		p.failures, now.Sub(p.since).Round(time.Second), now.Sub(p.lastOK).Round(time.Second), p.lastErr)
}

// repairSchema runs, on every failingAfter-th failure in a row, the schema check of the
// migrations: a table dropped by hand behind their back (recorded as applied) would otherwise
// fail every write until a restart. A check that finds everything in place changes nothing; one
// that cannot run (ClickHouse down) is left for the next round.
func (a *Aggregator) repairSchema(ctx context.Context) {
	a.progress.mu.Lock()
	n := a.progress.failures
	a.progress.mu.Unlock()
	if n%failingAfter != 0 {
		return
	}
	if repaired, err := migrate.Repair(ctx, a.store.conn, a.logger); err != nil {
		a.logger.Debug("schema check after failed writes", "err", err)
	} else if len(repaired) > 0 {
		a.logger.Warn("re-created missing schema objects after failed writes", "objects", repaired)
	}
}
