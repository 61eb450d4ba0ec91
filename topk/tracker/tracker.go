// Package tracker is topk's state: for each kind (items, ads) the exact 1m and 1h windows
// (package window) and the approximate 24h window (package approx), the last chunk applied per
// source partition (so a batch published twice counts once), and the next offset to read per
// counted partition. A snapshot (snapshot.go) saves all of it in one file, so a restart resumes
// from the snapshot's offsets with the state that matches them.
//
// Concurrency: Apply and the snapshot functions must be called from one goroutine (the
// consumer loop), which keeps the saved offsets consistent with the saved state; Advance and
// Lists may run concurrently with them from another goroutine.
package tracker

import (
	"fmt"
	"sync"
	"time"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/topk/approx"
	"github.com/tallypipeline/tally/topk/window"
)

// Options size the state.
type Options struct {
	Shards   int // shards of the exact windows (each key in one)
	Counters int // Space-Saving counters per hour of the 24h window
}

// Tracker holds the state of every kind.
type Tracker struct {
	opts  Options
	kinds map[schemas.CountKind]*kindState

	mu      sync.Mutex
	guards  map[source]Guard
	offsets map[int32]int64 // counted partition -> next offset to read
	skipped uint64          // chunks refused by a guard
}

type kindState struct {
	exact *window.Set
	day   *approx.Sketch
}

type source struct {
	kind      schemas.CountKind
	partition int32
}

// Guard is the last chunk applied from one source partition.
type Guard struct {
	Epoch uint64
	End   int64
	Chunk uint32
}

// after reports whether chunk (epoch, end, chunk) comes after g: a newer epoch, or the same
// epoch and a later (end, chunk). An older epoch is a writer that lost the partition.
func (g Guard) after(epoch uint64, end int64, chunk uint32) bool {
	if epoch != g.Epoch {
		return epoch > g.Epoch
	}
	return end > g.End || end == g.End && chunk > g.Chunk
}

// New returns an empty tracker whose windows end at now.
func New(o Options, now time.Time) *Tracker {
	t := &Tracker{opts: o, kinds: map[schemas.CountKind]*kindState{}, guards: map[source]Guard{}, offsets: map[int32]int64{}}
	for _, k := range schemas.CountKinds {
		t.kinds[k] = &kindState{
			exact: window.New([]window.Spec{window.OneMinute, window.OneHour}, o.Shards, now.Unix()),
			day:   approx.New(o.Counters, now.Unix()),
		}
	}
	return t
}

// Apply applies the record at offset of counted partition part, unless its source partition's
// guard shows the chunk was applied already, and reports whether it did.
func (t *Tracker) Apply(part int32, offset int64, c schemas.Counted) bool {
	t.mu.Lock()
	t.offsets[part] = offset + 1
	src := source{c.Kind, c.Batch.Partition}
	g, seen := t.guards[src]
	if seen && !g.after(c.Batch.Epoch, c.Batch.End, c.Chunk) {
		t.skipped++
		t.mu.Unlock()
		return false
	}
	t.guards[src] = Guard{c.Batch.Epoch, c.Batch.End, c.Chunk}
	t.mu.Unlock()
	ks := t.kinds[c.Kind]
	if ks == nil {
		return false // DecodeCounted accepts known kinds only
	}
	for _, e := range c.Counts {
		ks.exact.Add(e.Key, e.Second, e.Count)
		ks.day.Add(e.Key, e.Second, e.Count)
	}
	return true
}

// Skip records that the record at offset of partition part was read (and set aside).
func (t *Tracker) Skip(part int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.offsets[part] = offset + 1
}

// Offsets returns the next offset to read of every counted partition seen.
func (t *Tracker) Offsets() map[int32]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int32]int64, len(t.offsets))
	for p, o := range t.offsets {
		out[p] = o
	}
	return out
}

// Skipped returns how many chunks guards refused (published twice).
func (t *Tracker) Skipped() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skipped
}

// Advance slides every window to now.
func (t *Tracker) Advance(now time.Time) {
	for _, ks := range t.kinds {
		ks.exact.Advance(now.Unix())
		ks.day.Advance(now.Unix())
	}
}

// Lists returns kind's lists of every window (schemas.TopWindows order), each of at most k
// entries, stamped computedAt.
func (t *Tracker) Lists(kind schemas.CountKind, k int, computedAt time.Time) ([]schemas.TopList, error) {
	ks := t.kinds[kind]
	if ks == nil {
		return nil, fmt.Errorf("unknown kind %s", kind)
	}
	if k < 1 || k > schemas.MaxTopK {
		return nil, fmt.Errorf("k is %d; want 1..%d", k, schemas.MaxTopK)
	}
	out := make([]schemas.TopList, 0, 3)
	for w, sp := range ks.exact.Specs() {
		from, to := ks.exact.Bounds(w)
		// Each shard offers schemas.MaxTopK >= k candidates: the merge is exact (package window).
		es := ks.exact.Top(w, k, schemas.MaxTopK)
		l := list(kind, sp.Name, computedAt, from, to)
		l.Exact = true
		for i, e := range es {
			l.Entries = append(l.Entries, schemas.TopEntry{Rank: i + 1, Key: e.Key, Count: e.Count})
		}
		out = append(out, l)
	}
	from, to := ks.day.Bounds()
	es, bound, _ := ks.day.Top(k)
	l := list(kind, "24h", computedAt, from, to)
	l.ErrorBound = &bound
	for i, e := range es {
		l.Entries = append(l.Entries, schemas.TopEntry{Rank: i + 1, Key: e.Key, Count: e.Count})
	}
	return append(out, l), nil
}

func list(kind schemas.CountKind, name string, at time.Time, from, to int64) schemas.TopList {
	return schemas.TopList{Kind: kind.String(), Window: name, ComputedAt: at.UTC(),
		From: time.Unix(from, 0).UTC(), To: time.Unix(to, 0).UTC(), Entries: []schemas.TopEntry{}}
}

// Stats are sizes and drops for metrics.
type Stats struct {
	Keys, Entries int // held by the exact windows
	// Dropped counts the events no exact window took (their buckets had left the 1h window, or
	// were too far ahead); the 24h window counts them while their hour is in it. DayDropped
	// counts those whose hour was out of the 24h window too (or ahead of it): no list counts them.
	Dropped, DayDropped uint64
}

// Stats sums the sizes and drops of every kind's windows.
func (t *Tracker) Stats() Stats {
	var st Stats
	for _, ks := range t.kinds {
		s := ks.exact.Stats()
		st.Keys += s.Keys
		st.Entries += s.Entries
		st.Dropped += s.Dropped
		st.DayDropped += ks.day.Dropped()
	}
	return st
}
