package chembed

import (
	"context"
	"sync"
)

// priority orders the callers waiting for the engine.
type priority uint8

const (
	// pipelineFirst is tally's own traffic: ingest flushes, reads,
	// migrations. It always goes before any outside query that waits.
	pipelineFirst priority = iota
	// outsideLast is everyone else (dashboards): served only when no
	// pipeline call waits.
	outsideLast
)

// gate hands the engine to one caller at a time. The engine runs one query
// at a time whatever we do; the gate decides who is next, so an outside
// query can delay a pipeline call by at most the one outside query that
// is already running (whose time the engine bounds with
// max_execution_time), never by a queue of them.
type gate struct {
	mu      sync.Mutex
	busy    bool
	waiting [2][]chan struct{} // by priority, oldest first
}

// acquire waits for the engine until ctx is done.
func (g *gate) acquire(ctx context.Context, p priority) error {
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	g.waiting[p] = append(g.waiting[p], turn)
	g.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		for i, w := range g.waiting[p] {
			if w == turn {
				g.waiting[p] = append(g.waiting[p][:i], g.waiting[p][i+1:]...)
				return ctx.Err()
			}
		}
		// release handed us the engine as ctx ended: pass it on.
		g.handOff()
		return ctx.Err()
	}
}

// release gives the engine to the first pipeline waiter, else the first
// outside waiter, else frees it.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handOff()
}

// handOff needs g.mu held and the engine held by the caller.
func (g *gate) handOff() {
	for p := range g.waiting {
		if q := g.waiting[p]; len(q) > 0 {
			g.waiting[p] = q[1:]
			close(q[0])
			return
		}
	}
	g.busy = false
}
