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
	Name   string `json:"name"`
	Status string `json:"status"` // "up" or "down"
	Error  string `json:"error,omitempty"`
}

type check struct {
	name string
	fn   func(ctx context.Context) error
}

// checks is the set of readiness checks parts registered; safe for concurrent use.
type checks struct {
	mu   sync.Mutex
	list []check
}

// AddCheck registers a readiness check: fn reports whether a dependency the part needs (a
// client's server, the part's own progress) works now. Parts add checks when they start; a
// name added again replaces the earlier check (a part started again). fn must honour ctx.
func (r *Runner) AddCheck(name string, fn func(ctx context.Context) error) {
	r.checks.mu.Lock()
	defer r.checks.mu.Unlock()
	r.checks.list = slices.DeleteFunc(r.checks.list, func(c check) bool { return c.name == name })
	r.checks.list = append(r.checks.list, check{name, fn})
}

// Readiness runs every check at once, each within CheckTimeout, and reports whether the runner
// is ready (every part started, not stopping) and every check passed, with each check's result
// in registration order.
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
			results[i] = CheckResult{Name: c.name, Status: "up"}
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					err = errors.Join(errors.New("no answer within "+CheckTimeout.String()), err)
				}
				results[i] = CheckResult{Name: c.name, Status: "down", Error: err.Error()}
			}
		})
	}
	wg.Wait()
	ok := r.Ready()
	for _, res := range results {
		ok = ok && res.Status == "up"
	}
	return ok, results
}
