// Package approx keeps topk's 24-hour list: approximate, in bounded memory, with an error bound
// computed alongside every list.
//
// Each hour of event time has a weighted Space-Saving summary of m counters (Metwally, Agrawal,
// El Abbadi, 2005): a key already tracked adds its count; a new key takes a free counter, or
// replaces the key with the smallest counter c, starting at c plus its count and remembering c
// as its possible overestimate. In one hour h with N_h events, every tracked key's counter is
// at least its true count and at most its true count plus min_h (the smallest counter), and an
// untracked key's true count is at most min_h, where min_h <= N_h/m (0 while counters are
// free).
//
// The window is the 24 complete hours before the hour holding the clock's now, plus that hour
// in progress: [end-24h, end+1h) with end the start of the current hour, so the list always
// covers at least the last 24 hours and slides on hour boundaries (a complete-hours-only window
// would leave the list an hour stale, and empty for an hour after a first start).
// A key's estimate is the sum of its counters over those hours. Its error either way is at most
// B = sum of min_h over the window's hours (over when the key was tracked, under when it was
// not), and B <= N/m for the N events in the window: epsilon = 1/m, deterministic (delta = 0).
// Every listed count is within B of the true count, and a key not listed has a true count of at
// most the last listed count plus B (at most B when the list is shorter than k). Memory: 27 summaries (the window, the hour in progress,
// two ahead) of m counters, about 120 bytes each plus the key: m = 4096 holds about 13 MB per
// kind.
//
// Concurrency: a Sketch has one mutex; every method may be called from any goroutine.
package approx

import (
	"cmp"
	"container/heap"
	"slices"
	"sync"

	"github.com/tallypipeline/tally/schemas"
)

const (
	hourSeconds = 3600
	// Hours is the window's length in hours.
	Hours = 24
	// ahead bounds how many hours past the window's end a summary is kept (a clock gone wrong
	// cannot fill memory; the collector refuses events more than 5 minutes ahead).
	ahead = 2
)

// Entry is one listed key with its estimate.
type Entry struct {
	Key   string
	Count uint64
}

// Sketch is the 24-hour window of one kind.
type Sketch struct {
	mu      sync.Mutex
	m       int
	end     int64 // hour number of the hour in progress: the window is [end-Hours, end]
	hours   map[int64]*summary
	dropped uint64
}

// New returns an empty sketch of m counters per hour whose window ends at the hour of nowSec.
func New(m int, nowSec int64) *Sketch {
	return &Sketch{m: m, end: schemas.FloorDiv(nowSec, hourSeconds), hours: map[int64]*summary{}}
}

// Counters returns m.
func (s *Sketch) Counters() int { return s.m }

// Add counts n events of key at event-time second sec.
func (s *Sketch) Add(key string, sec int64, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := schemas.FloorDiv(sec, hourSeconds)
	if h < s.end-Hours || h >= s.end+ahead {
		s.dropped += n
		return
	}
	sm := s.hours[h]
	if sm == nil {
		sm = newSummary(s.m)
		s.hours[h] = sm
	}
	sm.add(key, n)
}

// Advance moves the window's end to the hour of nowSec and frees the hours that left it.
func (s *Sketch) Advance(nowSec int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := schemas.FloorDiv(nowSec, hourSeconds)
	if end <= s.end {
		return
	}
	s.end = end
	for h := range s.hours {
		if h < end-Hours {
			delete(s.hours, h)
		}
	}
}

// Bounds returns the window's event-time range [from, to) in Unix seconds; to is the end of
// the hour in progress.
func (s *Sketch) Bounds() (from, to int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return (s.end - Hours) * hourSeconds, (s.end + 1) * hourSeconds
}

// Top returns the k keys with the largest estimates (equal estimates by key ascending), the
// error bound B of every listed count, and the events N the window's summaries saw (B <= N/m).
func (s *Sketch) Top(k int) (list []Entry, bound, total uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	est := map[string]uint64{}
	for h, sm := range s.hours {
		if h < s.end-Hours || h > s.end {
			continue
		}
		bound += sm.min()
		total += sm.total
		for _, c := range sm.heap {
			est[c.key] += c.count
		}
	}
	list = make([]Entry, 0, len(est))
	for key, n := range est {
		list = append(list, Entry{key, n})
	}
	slices.SortFunc(list, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return list[:min(k, len(list))], bound, total
}

// Counter is one stored counter, for snapshots.
type Counter struct {
	Key        string
	Count, Err uint64
}

// Each calls fn with every hour's summary (start second, events seen, counters) for snapshots.
func (s *Sketch) Each(fn func(hourStart int64, total uint64, counters []Counter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, sm := range s.hours {
		cs := make([]Counter, len(sm.heap))
		for i, c := range sm.heap {
			cs[i] = Counter{c.key, c.count, c.err}
		}
		fn(h*hourSeconds, sm.total, cs)
	}
}

// Restore puts back one hour's summary saved by Each (counters beyond m are dropped, smallest
// first, and widen nothing: they only ever lower the estimates of keys no longer tracked).
func (s *Sketch) Restore(hourStart int64, total uint64, counters []Counter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := schemas.FloorDiv(hourStart, hourSeconds)
	if h < s.end-Hours || h >= s.end+ahead {
		return
	}
	sm := newSummary(s.m)
	slices.SortFunc(counters, func(a, b Counter) int { return cmp.Compare(b.Count, a.Count) })
	for _, c := range counters[:min(len(counters), s.m)] {
		e := &counter{key: c.Key, count: c.Count, err: c.Err}
		sm.index[c.Key] = e
		heap.Push(&sm.heap, e)
	}
	sm.total = total
	s.hours[h] = sm
}

// Dropped returns the events that arrived for hours out of the sketch's reach.
func (s *Sketch) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// summary is one hour's Space-Saving summary: counters in a min-heap by count, indexed by key.
type summary struct {
	m     int
	total uint64
	index map[string]*counter
	heap  counterHeap
}

type counter struct {
	key        string
	count, err uint64
	i          int // position in the heap
}

func newSummary(m int) *summary {
	return &summary{m: m, index: make(map[string]*counter, m)}
}

func (sm *summary) add(key string, n uint64) {
	sm.total += n
	if c := sm.index[key]; c != nil {
		c.count += n
		heap.Fix(&sm.heap, c.i)
		return
	}
	if len(sm.heap) < sm.m {
		c := &counter{key: key, count: n}
		sm.index[key] = c
		heap.Push(&sm.heap, c)
		return
	}
	c := sm.heap[0]
	delete(sm.index, c.key)
	c.key, c.err, c.count = key, c.count, c.count+n
	sm.index[key] = c
	heap.Fix(&sm.heap, 0)
}

// min is the smallest counter when every counter is taken; 0 while some are free (then every
// key ever seen is tracked exactly).
func (sm *summary) min() uint64 {
	if len(sm.heap) < sm.m {
		return 0
	}
	return sm.heap[0].count
}

type counterHeap []*counter

func (h counterHeap) Len() int           { return len(h) }
func (h counterHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h counterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *counterHeap) Push(x any) {
	c := x.(*counter)
	c.i = len(*h)
	*h = append(*h, c)
}
func (h *counterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
