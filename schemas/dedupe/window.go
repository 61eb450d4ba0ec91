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
// 1 + (window + grace) / window of them (two with the default grace, shorter than the window);
// most hold one. Memory follows that: a map of each pair's newest counted time, a second map
// for pairs holding two or more, and a list only for pairs holding three or more.
//
// Edge servers' view counts go through the same rule under their own keys (CountKey) at the
// start of their second: a retry carries the same second, so it is a duplicate for as long as
// its original is held.
//
// A Window is not safe for concurrent use: each Kafka partition owns one.
package dedupe

import (
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Window is the dedupe state of one partition. Times are Unix milliseconds.
type Window struct {
	window    int64
	horizon   int64 // window + grace
	watermark int64
	// The counted views held for a pair, newest first: newest[k], then second[k] if the pair
	// holds two or more, then rest[k] (ascending) if it holds three or more. A key of rest is
	// a key of second, and a key of second a key of newest. Forgotten times stay until Evict or
	// until the pair is next seen; decisions skip them.
	newest map[uint64]int64
	second map[uint64]int64
	rest   map[uint64][]int64
	buf    []int64 // the older counted views of the pair being decided
}

// New returns an empty window; window and grace are in milliseconds.
func New(window, grace int64) *Window {
	return &Window{window: window, horizon: window + grace, watermark: minTime,
		newest: make(map[uint64]int64), second: make(map[uint64]int64), rest: make(map[uint64][]int64)}
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

// CountKey is the identity of an edge server's view count (source, seq) in the same window as
// the viewer pairs: counts are deduplicated by the same rule and checkpointed with the same
// state. It hashes 0x01, the source, 0x01 and seq's 8 bytes: no id holds 0x01 (ids are
// printable), so a count's key and a pair's differ unless the 64-bit hashes collide, as two
// pairs' may.
func CountKey(sourceID string, seq uint64) uint64 {
	var b [1 + 8]byte
	b[0] = 1
	binary.BigEndian.PutUint64(b[1:], seq)
	d := xxhash.New()
	_, _ = d.Write(b[:1])
	_, _ = d.WriteString(sourceID)
	_, _ = d.Write(b[:])
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
			w.forget(key)
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
		w.pushOlder(key, newest, cutoff)
		return true
	}
	// A window or more before the newest: only the older counted views can be near it, and of
	// those only its neighbours in time.
	o := w.older(key, cutoff)
	i, _ := slices.BinarySearch(o, t)
	counts := (i == 0 || t-o[i-1] >= w.window) && (i == len(o) || o[i]-t >= w.window)
	if counts && t >= cutoff {
		o = slices.Insert(o, i, t)
	}
	w.setOlder(key, o)
	return counts
}

// forget drops everything held for pair key.
func (w *Window) forget(key uint64) {
	delete(w.newest, key)
	delete(w.second, key)
	delete(w.rest, key)
}

// pushOlder adds t, later than every older counted view of pair key, to them.
func (w *Window) pushOlder(key uint64, t, cutoff int64) {
	if s, ok := w.second[key]; ok && s >= cutoff {
		w.rest[key] = append(live(w.rest[key], cutoff), s)
	} else if ok {
		delete(w.rest, key) // older than a forgotten view: forgotten
	}
	w.second[key] = t
}

// older returns the held counted views of pair key besides the newest, ascending, in w.buf.
func (w *Window) older(key uint64, cutoff int64) []int64 {
	o := w.buf[:0]
	if s, ok := w.second[key]; ok && s >= cutoff {
		o = append(live(append(o, w.rest[key]...), cutoff), s)
	}
	w.buf = o
	return o
}

// setOlder stores o, ascending, as the counted views of pair key besides the newest.
func (w *Window) setOlder(key uint64, o []int64) {
	switch n := len(o); n {
	case 0:
		delete(w.second, key)
		delete(w.rest, key)
	case 1:
		w.second[key] = o[0]
		delete(w.rest, key)
	default:
		w.second[key] = o[n-1]
		w.rest[key] = append(w.rest[key][:0], o[:n-1]...)
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
		w.forget(key)
		w.newest[key] = t
	case t > newest:
		w.newest[key] = t
		w.pushOlder(key, newest, cutoff)
	case t < newest:
		o := w.older(key, cutoff)
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
			w.forget(k)
			n++
		}
	}
	for k, t := range w.second {
		if t < cutoff {
			delete(w.second, k)
			delete(w.rest, k)
		}
	}
	for k, r := range w.rest {
		if r = live(r, cutoff); len(r) == 0 {
			delete(w.rest, k)
		} else {
			w.rest[k] = r
		}
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
