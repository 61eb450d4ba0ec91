package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// CheckTimeout bounds one readiness check, so that a dependency that hangs reads as down
// instead of holding /readyz.
const CheckTimeout = 3 * time.Second

// CheckResult is the outcome of one readiness check, as /readyz reports it.
type CheckResult struct {
	Name     string `json:"name"`
	Status   string `json:"status"` // "up" or "down"
	Required bool   `json:"required"`
	Error    string `json:"error,omitempty"`
}

type check struct {
	name     string
	fn       func(ctx context.Context) error
	required bool
}

// checks is the set of readiness checks parts registered; safe for concurrent use.
type checks struct {
	mu   sync.Mutex
	list []check
}

// AddCheck registers a readiness check: fn reports whether a dependency the part needs for its
// job (a client's server, the part's own progress) works now; the process is not ready while it
// fails. Parts add checks when they start; a name added again replaces the earlier check (a part
// started again). fn must honour ctx.
func (r *Runner) AddCheck(name string, fn func(ctx context.Context) error) {
	r.addCheck(check{name, fn, true})
}

// AddDegradingCheck registers a check of a dependency only some requests need (the collector's
// reads need ClickHouse and Redis, its ingest only Kafka): /readyz reports it, and while it
// fails the process is degraded, still ready. Those requests answer 503 on their own.
func (r *Runner) AddDegradingCheck(name string, fn func(ctx context.Context) error) {
	r.addCheck(check{name, fn, false})
}

func (r *Runner) addCheck(c check) {
	r.checks.mu.Lock()
	defer r.checks.mu.Unlock()
	r.checks.list = slices.DeleteFunc(r.checks.list, func(o check) bool { return o.name == c.name })
	r.checks.list = append(r.checks.list, c)
}

// Readiness runs every check at once, each within CheckTimeout, and reports whether the runner
// is ready (every part started, not stopping) and every required check passed, with each
// check's result in registration order.
func (r *Runner) Readiness(ctx context.Context) (bool, []CheckResult) {
	r.checks.mu.Lock()
	list := slices.Clone(r.checks.list)
	r.checks.mu.Unlock()
	results := make([]CheckResult, len(list))
	var wg sync.WaitGroup
	for i, c := range list {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
			defer cancel()
			err := c.fn(cctx)
			if err == nil && cctx.Err() != nil {
				err = cctx.Err()
			}
			results[i] = CheckResult{Name: c.name, Status: "up", Required: c.required}
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					err = errors.Join(errors.New("no answer within "+CheckTimeout.String()), err)
				}
				results[i].Status, results[i].Error = "down", err.Error()
			}
		})
	}
	wg.Wait()
	ok := r.Ready()
	for _, res := range results {
		ok = ok && (res.Status == "up" || !res.Required)
	}
	return ok, results
}
