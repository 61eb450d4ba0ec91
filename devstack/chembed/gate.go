package chembed

import (
	"context"
	"slices"
	"sync"
	"time"
)

// priority orders the callers waiting for the engine.
type priority uint8

const (
	// pipelineRead is tally's own queries (SELECT): a page's counts that
	// Redis lacks, a series, a claim's checkpoint. They go before the
	// pipeline's writes that wait, so a read waits for the statement that
	// runs, not for a queue of flushes (after a Redis failover the pages'
	// reads fall back here while every aggregator replays into the engine).
	// A read delays a flush's next statement by its own time, bounded by
	// the caller (max_execution_time); reads back to back let a waiting
	// write in once per writeEvery.
	pipelineRead priority = iota
	// pipelineWrite is the rest of tally's traffic: ingest flushes,
	// migrations. It goes before any outside query that waits, but one.
	pipelineWrite
	// outsideLast is everyone else (dashboards): served when no pipeline
	// call waits and the pipeline has been idle for pipelineQuiet, or when
	// it has waited outsideEvery.
	outsideLast
	priorities
)

// pipelinePriority is the place in line of a pipeline statement of kind
// (its first keyword).
func pipelinePriority(kind string) priority {
	switch kind {
	case "SELECT", "WITH", "(", "SHOW", "DESCRIBE", "DESC", "EXISTS":
		return pipelineRead
	}
	return pipelineWrite
}

const (
	// pipelineQuiet is how long the pipeline must have left the engine
	// alone before an outside query may start. A flush is a run of
	// statements, each sent when the one before it returns: were an outside
	// query allowed in between, every statement of the flush would wait for
	// one, and counting would stall for several outside queries' time.
	pipelineQuiet = 200 * time.Millisecond
	// catchUpQuiet replaces pipelineQuiet after an outside query made a
	// pipeline call wait. The pipeline then has a backlog: the rest of the
	// flush that waited, its periodic writes and the batch consumed
	// meanwhile, whose statements are separated by Redis and Kafka work that
	// on a loaded host takes longer than pipelineQuiet. Let in at such a gap,
	// a second outside query would stall the same backlog again.
	catchUpQuiet = time.Second
	// outsideEvery bounds how long a busy pipeline keeps outside queries
	// out: an outside caller that has waited this long goes next, ahead of
	// the pipeline, once per outsideEvery. The pipeline then waits for at
	// most one outside query (max_execution_time) in that time.
	outsideEvery = 5 * time.Second
	// writeEvery bounds how long reads back to back (a stream of series
	// requests) keep the pipeline's writes out: a write that has waited
	// this long, with no write done within it, goes before the reads. A
	// replay's writes run whenever no read waits, so a read that arrives
	// still waits only for the statement running.
	writeEvery = 250 * time.Millisecond
)

// gate hands the engine to one caller at a time (it runs one query at a
// time whatever we do) and decides who is next: outside queries delay a run
// of pipeline calls by at most one outside query (bounded by
// max_execution_time), never by a queue of them, one per statement, nor a
// second one while the pipeline catches up on what the first held back.
type gate struct {
	mu           sync.Mutex
	busy         bool
	held         priority             // who holds the engine while busy
	lastPipeline time.Time            // when a pipeline call last gave it up
	lastOutside  time.Time            // when an outside call last gave it up
	lastWrite    time.Time            // when a pipeline write last gave it up
	stalled      bool                 // the last outside call to give the engine up left pipeline calls waiting
	waiting      [priorities][]waiter // by priority, oldest first
	timer        *time.Timer          // hands off to an outside waiter once the pipeline is quiet
}

type waiter struct {
	turn  chan struct{}
	since time.Time
}

// acquire waits for the engine until ctx is done.
func (g *gate) acquire(ctx context.Context, p priority) error {
	g.mu.Lock()
	if !g.busy && (p != outsideLast || len(g.waiting[outsideLast]) == 0 && g.quietLeft() <= 0) {
		g.busy, g.held = true, p
		g.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	g.waiting[p] = append(g.waiting[p], waiter{turn, time.Now()})
	if !g.busy {
		g.handOff() // arms the timer for this outside caller
	}
	g.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		if i := slices.IndexFunc(g.waiting[p], func(w waiter) bool { return w.turn == turn }); i >= 0 {
			g.waiting[p] = slices.Delete(g.waiting[p], i, i+1)
			return ctx.Err()
		}
		// handOff gave us the engine as ctx ended: pass it on.
		g.handOff()
		return ctx.Err()
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != outsideLast {
		g.lastPipeline = time.Now()
		if g.held == pipelineWrite {
			g.lastWrite = g.lastPipeline
		}
	} else {
		g.lastOutside = time.Now()
		g.stalled = len(g.waiting[pipelineRead])+len(g.waiting[pipelineWrite]) > 0
	}
	g.handOff()
}

// quietLeft is how long an outside caller must still wait for the
// pipeline to have been idle for pipelineQuiet, or catchUpQuiet once an
// outside query has stalled it.
func (g *gate) quietLeft() time.Duration {
	quiet := pipelineQuiet
	if g.stalled {
		quiet = catchUpQuiet
	}
	return quiet - time.Since(g.lastPipeline)
}

// overdue reports whether the oldest outside caller has waited
// outsideEvery and no outside query ran within it.
func (g *gate) overdue() bool {
	q := g.waiting[outsideLast]
	return len(q) > 0 && time.Since(q[0].since) >= outsideEvery && time.Since(g.lastOutside) >= outsideEvery
}

// handOff gives the engine to an overdue outside caller, else an overdue
// pipeline writer, else the first pipeline reader, else the first pipeline
// writer, else, once the pipeline is quiet, the first outside waiter, else
// frees it. It needs g.mu held and the engine held by the caller, or free.
func (g *gate) handOff() {
	g.busy = true
	if g.overdue() {
		g.give(outsideLast)
		return
	}
	if w := g.waiting[pipelineWrite]; len(w) > 0 && time.Since(w[0].since) >= writeEvery && time.Since(g.lastWrite) >= writeEvery {
		g.give(pipelineWrite)
		return
	}
	for _, p := range []priority{pipelineRead, pipelineWrite} {
		if len(g.waiting[p]) > 0 {
			g.give(p)
			return
		}
	}
	if len(g.waiting[outsideLast]) > 0 {
		if wait := g.quietLeft(); wait > 0 {
			if g.timer != nil {
				g.timer.Stop()
			}
			g.timer = time.AfterFunc(wait, g.wake)
		} else {
			g.give(outsideLast)
			return
		}
	}
	g.busy = false
}

// give hands the engine to the first waiter of priority p.
func (g *gate) give(p priority) {
	q := g.waiting[p]
	g.waiting[p], g.held = q[1:], p
	close(q[0].turn)
}

// wake hands a free engine on once the pipeline's quiet time is up.
func (g *gate) wake() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.busy {
		g.handOff()
	}
}
