// Package dedupe decides whether a view counts: a view counts unless a counted view of the same
// (viewer, item) pair lies within the window (30 minutes by default) of it, before or after,
// among the counted views still held. For events in order this is exactly "SET NX with a
// 30-minute expiry".
//
// The decision is a pure function of the events seen so far, in log order, so the state can be
// persisted with a checkpoint and restored to give the same answers after a crash. Precisely,
// the partition keeps a watermark, the newest event time seen, and for each pair the event
// times of its counted views. A counted view is held while its time is at or after
// watermark - (window + grace); older ones are forgotten. An event (pair, t) first raises the
// watermark to t, then:
//   - if a held counted view c of the pair has |t - c| < window, it is a duplicate;
//   - otherwise it counts, and t is held with the pair's other counted views (unless t is
//     itself already forgotten).
//
// So an exact retry never counts twice while its original is held, nor does a repeat of an
// older counted view that arrives after a newer window of the pair opened; a view a window or
// more from every held counted view counts (it belongs to a window of its own); and a view
// arriving more than grace behind the watermark is deduplicated only against what is still
// held, so it may count again (documented in docs/EXACTLY_ONCE.md). Forgetting is checked at
// decision time, so when memory is freed (Evict) changes no answer.
//
// Held counted views of one pair are at least a window apart, so a pair holds at most
// 1 + (window + grace) / window of them; most hold one. Memory follows that: one map entry of
// the pair's newest counted time, and only pairs holding more than one have an entry in a
// second map with their older times.
//
// A Window is not safe for concurrent use: each Kafka partition owns one.
package dedupe

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Window is the dedupe state of one partition. Times are Unix milliseconds.
type Window struct {
	window    int64
	horizon   int64 // window + grace
	watermark int64
	// newest is the time of each pair's newest counted view; older holds, in ascending order,
	// the pair's other counted views, for pairs that have any (a key of older is always a key
	// of newest). Either may still hold forgotten times until Evict: decisions skip them.
	newest map[uint64]int64
	older  map[uint64][]int64
}

// New returns an empty window; window and grace are in milliseconds.
func New(window, grace int64) *Window {
	return &Window{window: window, horizon: window + grace, watermark: minTime,
		newest: make(map[uint64]int64), older: make(map[uint64][]int64)}
}

const minTime = -1 << 63

// Key is the 64-bit identity of a (viewer, item) pair. It is stable across processes and
// versions because it is persisted; two pairs sharing a key would be deduplicated together
// (probability about n²/2⁶⁵ for n live pairs).
func Key(viewerID, itemID string) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(viewerID)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(itemID)
	return d.Sum64()
}

// Observe applies the rule to an event of pair key at time t and reports whether it counts.
func (w *Window) Observe(key uint64, t int64) bool {
	if t > w.watermark {
		w.watermark = t
	}
	cutoff := w.watermark - w.horizon
	newest, ok := w.newest[key]
	if !ok || newest < cutoff {
		// Nothing held: every older counted view of the pair is older still.
		if ok {
			delete(w.older, key)
			delete(w.newest, key)
		}
		if t >= cutoff {
			w.newest[key] = t
		}
		return true
	}
	if d := t - newest; d < w.window && d > -w.window {
		return false
	}
	if t > newest {
		// A new window, later than every held view: the newest becomes an older one.
		w.newest[key] = t
		w.older[key] = append(live(w.older[key], cutoff), newest)
		return true
	}
	// A window or more before the newest: only the older counted views can be near it, and of
	// those only its neighbours in time.
	o := live(w.older[key], cutoff)
	i, _ := slices.BinarySearch(o, t)
	counts := (i == 0 || t-o[i-1] >= w.window) && (i == len(o) || o[i]-t >= w.window)
	if counts && t >= cutoff {
		o = slices.Insert(o, i, t)
	}
	w.setOlder(key, o)
	return counts
}

func (w *Window) setOlder(key uint64, o []int64) {
	if len(o) == 0 {
		delete(w.older, key)
	} else {
		w.older[key] = o
	}
}

// live drops the times in ascending ts that are before cutoff, in place.
func live(ts []int64, cutoff int64) []int64 {
	n, _ := slices.BinarySearch(ts, cutoff)
	if n == 0 {
		return ts
	}
	return ts[:copy(ts, ts[n:])]
}

// Watermark is the newest event time observed or restored.
func (w *Window) Watermark() int64 { return w.watermark }

// Restore raises the watermark to one loaded from a checkpoint; restore it before the pairs.
func (w *Window) Restore(watermark int64) {
	if watermark > w.watermark {
		w.watermark = watermark
	}
}

// RestorePair adds t to the counted views held for pair key. Restoring every counted view at or
// after LiveSince, in any order and any number of times each, gives the state that made them.
func (w *Window) RestorePair(key uint64, t int64) {
	cutoff := w.LiveSince()
	if t < cutoff {
		return
	}
	newest, ok := w.newest[key]
	switch {
	case !ok || newest < cutoff:
		delete(w.older, key)
		w.newest[key] = t
	case t > newest:
		w.newest[key] = t
		w.older[key] = append(live(w.older[key], cutoff), newest)
	case t < newest:
		o := live(w.older[key], cutoff)
		if i, found := slices.BinarySearch(o, t); !found {
			o = slices.Insert(o, i, t)
		}
		w.setOlder(key, o)
	}
}

// Evict drops state that can no longer affect a decision and returns how many pairs it dropped.
// It changes no answer (Observe ignores forgotten state anyway); it only frees memory.
func (w *Window) Evict() int {
	if w.watermark == minTime {
		return 0
	}
	n := 0
	cutoff := w.watermark - w.horizon
	for k, t := range w.newest {
		if t < cutoff {
			delete(w.newest, k)
			delete(w.older, k)
			n++
		}
	}
	for k, o := range w.older {
		w.setOlder(k, live(o, cutoff))
	}
	return n
}

// Len is the number of pairs held.
func (w *Window) Len() int { return len(w.newest) }

// LiveSince is the oldest counted time that is still held: state older than this need not be
// restored after a restart.
func (w *Window) LiveSince() int64 {
	if w.watermark == minTime {
		return minTime
	}
	return w.watermark - w.horizon
}
