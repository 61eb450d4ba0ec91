// Package lifecycle is the one start/stop mechanism of every tally binary: parts start in order,
// readiness flips once all are up, and on a signal (or a part's failure) they stop in reverse
// order (stop intake, flush producers, finish batches, commit, close), each step logged with its
// duration and the whole bounded by a timeout. It also serves /healthz, /readyz and /metrics.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Part is one thing a binary starts and stops. Start must return once the part is serving (it
// may keep goroutines running); Stop must release everything Start took, within ctx.
type Part struct {
	Name  string
	Start func(ctx context.Context) error
	Stop  func(ctx context.Context) error
}

// Runner runs parts. Ready reports whether every part has started and none is stopping.
type Runner struct {
	logger *slog.Logger
	ready  atomic.Bool
	failed chan error
	checks checks
}

// NewRunner returns a runner logging to logger.
func NewRunner(logger *slog.Logger) *Runner {
	return &Runner{logger: logger, failed: make(chan error, 1)}
}

// Ready is true between a successful start of every part and the beginning of shutdown. It does
// not run the readiness checks; Readiness does.
func (r *Runner) Ready() bool { return r.ready.Load() }

// Fail asks the runner to shut down because a part can no longer work; the first error wins and
// becomes Run's result.
func (r *Runner) Fail(err error) {
	select {
	case r.failed <- err:
	default:
	}
}

// Run starts parts in order, waits until ctx ends or a part calls Fail, then stops the started
// parts in reverse order within stopTimeout. It returns the first start or failure error, or
// the stop errors.
func (r *Runner) Run(ctx context.Context, stopTimeout time.Duration, parts ...Part) error {
	var started []Part
	var runErr error
	for _, p := range parts {
		t0 := time.Now()
		if err := p.Start(ctx); err != nil {
			runErr = fmt.Errorf("start %s: %w", p.Name, err)
			r.logger.Error("start failed", "part", p.Name, "err", err)
			break
		}
		r.logger.Info("started", "part", p.Name, "took", time.Since(t0).Round(time.Millisecond))
		started = append(started, p)
	}
	if runErr == nil {
		r.ready.Store(true)
		r.logger.Info("ready")
		select {
		case <-ctx.Done():
			r.logger.Info("shutdown requested")
		case err := <-r.failed:
			runErr = err
			r.logger.Error("shutting down after failure", "err", err)
		}
	}
	r.ready.Store(false)
	return errors.Join(runErr, r.stop(started, stopTimeout))
}

func (r *Runner) stop(started []Part, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	t0 := time.Now()
	var errs []error
	for i := len(started) - 1; i >= 0; i-- {
		p := started[i]
		if p.Stop == nil {
			continue
		}
		ts := time.Now()
		if err := stopWithin(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", p.Name, err))
			r.logger.Error("stop failed", "part", p.Name, "took", time.Since(ts).Round(time.Millisecond), "err", err)
			continue
		}
		r.logger.Info("stopped", "part", p.Name, "took", time.Since(ts).Round(time.Millisecond))
	}
	r.logger.Info("shutdown complete", "took", time.Since(t0).Round(time.Millisecond))
	return errors.Join(errs...)
}

// stopWithin runs p.Stop and returns when it does, or when ctx ends: a part still stopping past
// the shutdown timeout is left behind, so the process exits within the bound whatever the part
// waits for (every part keeps its own durable progress, which is what makes that safe). The
// parts stopped after it get an ended ctx and give up at once.
func stopWithin(ctx context.Context, p Part) error {
	done := make(chan error, 1)
	go func() { done <- p.Stop(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("still stopping when the shutdown timeout ran out; left behind: %w", ctx.Err())
	}
}
