// Package dedupe decides whether a view counts: a view counts unless the same (viewer, item)
// pair already has a counted view within the window (30 minutes by default) of event time.
// For events in order this is exactly "SET NX with a 30-minute expiry".
//
// The decision is a pure function of the events seen so far, in log order, so the state can be
// persisted with a checkpoint and restored to give the same answers after a crash. Precisely,
// for each pair the state holds last, the event time of its newest counted view, and the
// partition keeps a watermark, the newest event time seen. An event (pair, t) first raises the
// watermark to t, then:
//   - if the pair has no live state, it counts and last = t. State is live while
//     last >= watermark - (window + grace); older state is forgotten.
//   - if |t - last| < window, it is a duplicate.
//   - otherwise it counts; last = max(last, t).
//
// So an out-of-order view within the window of the newest counted one is a duplicate; one more
// than a window before it counts (it belongs to an earlier window); and a view arriving more than
// grace behind the watermark is deduplicated only against state still held, so it may count
// again (documented in docs/EXACTLY_ONCE.md).
//
// A Window is not safe for concurrent use: each Kafka partition owns one.
package dedupe

import (
	"github.com/cespare/xxhash/v2"
)

// Window is the dedupe state of one partition. Times are Unix milliseconds.
type Window struct {
	window    int64
	horizon   int64 // window + grace
	watermark int64
	last      map[uint64]int64
}

// New returns an empty window; window and grace are in milliseconds.
func New(window, grace int64) *Window {
	return &Window{window: window, horizon: window + grace, watermark: minTime, last: make(map[uint64]int64)}
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
	last, ok := w.last[key]
	if !ok || last < w.watermark-w.horizon {
		w.last[key] = t
		return true
	}
	if d := t - last; d < w.window && d > -w.window {
		return false
	}
	if t > last {
		w.last[key] = t
	}
	return true
}

// Watermark is the newest event time observed or restored.
func (w *Window) Watermark() int64 { return w.watermark }

// Restore raises the watermark to one loaded from a checkpoint; restore it before the pairs.
func (w *Window) Restore(watermark int64) {
	if watermark > w.watermark {
		w.watermark = watermark
	}
}

// RestorePair sets pair key's last counted time, keeping the larger of old and new.
func (w *Window) RestorePair(key uint64, last int64) {
	if old, ok := w.last[key]; !ok || last > old {
		w.last[key] = last
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
	for k, last := range w.last {
		if last < cutoff {
			delete(w.last, k)
			n++
		}
	}
	return n
}

// Len is the number of pairs held.
func (w *Window) Len() int { return len(w.last) }

// LiveSince is the oldest last-counted time that is still live: state older than this need not
// be restored after a restart.
func (w *Window) LiveSince() int64 {
	if w.watermark == minTime {
		return minTime
	}
	return w.watermark - w.horizon
}
