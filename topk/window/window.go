// Package window keeps exact per-key counts over sliding event-time windows (topk's 1m and 1h)
// and answers their exact top-K without sorting every key.
//
// Keys are sharded by hash: each key lives in exactly one shard, which holds its counts per
// bucket (only for buckets still in, or not yet in, a window) and its total per window. A
// window is the last N complete buckets, [end-N, end), where end is the bucket holding the
// clock's now: it slides when the clock crosses a bucket boundary (1m: every 5 s; 1h: every
// minute), and the bucket in progress counts once it is complete. A count for a bucket that
// already left the window is dropped (it can never be in a window again, since end only grows),
// so the totals for a given end are exactly the counts of [end-N, end) whatever order counts
// arrived in, which is what makes the list equal to one computed from the log.
//
// Exact merge: each shard contributes its top C keys by the list order (count descending, key
// ascending). With every key in one shard and C >= K, the merged top K is the exact top K: a key
// in the global top K has fewer than K keys before it overall, so fewer than K in its own shard,
// so it is among its shard's top C.
//
// Concurrency: a shard has its own mutex; Add, Advance and Top may be called from any
// goroutines. Top runs one goroutine per shard and waits for them all before returning.
package window

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/tallypipeline/tally/schemas"
)

// Spec is one window: N buckets of BucketSeconds.
type Spec struct {
	Name          string
	BucketSeconds int64
	Buckets       int64
}

// Exact windows topk serves: 1m in 5-second buckets, 1h in 1-minute buckets.
var (
	OneMinute = Spec{Name: "1m", BucketSeconds: 5, Buckets: 12}
	OneHour   = Spec{Name: "1h", BucketSeconds: 60, Buckets: 60}
)

// MaxAhead bounds how far ahead of its window's end (in window lengths) a bucket is kept: the
// collector refuses events more than collector.future_bound (5 minutes) ahead, so this only
// bounds memory against a clock gone wrong.
const MaxAhead = 2

// Entry is one key's count.
type Entry struct {
	Key   string
	Count uint64
}

// Before is the list order: larger count first, equal counts by key ascending.
func Before(a, b Entry) bool {
	return a.Count > b.Count || a.Count == b.Count && a.Key < b.Key
}

func compare(a, b Entry) int {
	if c := cmp.Compare(b.Count, a.Count); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// Set is the windows of one kind (items or ads), sharded by key.
type Set struct {
	specs  []Spec
	shards []*shard
}

// MaxWindows is how many windows a Set holds at most (topk's exact ones: 1m and 1h).
const MaxWindows = 2

// keyState is one key's entry in its shard's dense slice: scanning a contiguous slice is what
// keeps a top-K pass over a million keys cheap (no pointer per key to chase).
type keyState struct {
	key    string
	counts [MaxWindows]uint64 // per window: the total over the window's buckets
	refs   int32              // bucket entries holding this key; 0: the slot is free
}

type win struct {
	spec    Spec
	end     int64 // window is [end-Buckets, end), in bucket numbers
	buckets map[int64]map[int32]uint64
}

type shard struct {
	mu   sync.Mutex
	idx  map[string]int32 // key -> its slot in ks
	ks   []keyState
	free []int32 // free slots of ks
	wins []win
	// dropped counts the events no window took: their buckets had left every window (late
	// beyond the widest) or were too far ahead. One a narrower window missed but a wider one
	// took is still in a list.
	dropped uint64
}

// New returns windows of specs (at most MaxWindows) with shards shards, their ends at the
// bucket holding nowSec.
func New(specs []Spec, shards int, nowSec int64) *Set {
	if len(specs) > MaxWindows {
		panic(fmt.Sprintf("window.New: %d windows; at most %d", len(specs), MaxWindows))
	}
	s := &Set{specs: specs, shards: make([]*shard, shards)}
	for i := range s.shards {
		sh := &shard{idx: map[string]int32{}, wins: make([]win, len(specs))}
		for w, sp := range specs {
			sh.wins[w] = win{spec: sp, end: schemas.FloorDiv(nowSec, sp.BucketSeconds), buckets: map[int64]map[int32]uint64{}}
		}
		s.shards[i] = sh
	}
	return s
}

// Specs returns the windows.
func (s *Set) Specs() []Spec { return s.specs }

func (s *Set) shardOf(key string) *shard {
	return s.shards[xxhash.Sum64String(key)%uint64(len(s.shards))]
}

// Add counts n events of key at event-time second sec.
func (s *Set) Add(key string, sec int64, n uint64) {
	sh := s.shardOf(key)
	sh.mu.Lock()
	sh.add(key, sec, n)
	sh.mu.Unlock()
}

func (sh *shard) add(key string, sec int64, n uint64) {
	i := int32(-1)
	for w := range sh.wins {
		i = sh.put(w, schemas.FloorDiv(sec, sh.wins[w].spec.BucketSeconds), key, n, i)
	}
	if i < 0 {
		sh.dropped += n
	}
}

// put adds n to key's count in window w's bucket b, unless b is out of the window's reach.
// i is key's slot if the caller has it, else -1; put returns it (-1 while no window took the
// count).
func (sh *shard) put(w int, b int64, key string, n uint64, i int32) int32 {
	wn := &sh.wins[w]
	if b < wn.end-wn.spec.Buckets || b >= wn.end+MaxAhead*wn.spec.Buckets {
		return i
	}
	if i < 0 {
		i = sh.slot(key)
	}
	m := wn.buckets[b]
	if m == nil {
		m = map[int32]uint64{}
		wn.buckets[b] = m
	}
	ks := &sh.ks[i]
	if _, ok := m[i]; !ok {
		ks.refs++
	}
	m[i] += n
	if b < wn.end {
		ks.counts[w] += n
	}
	return i
}

// slot returns key's slot, taking a free one (or a new one) for a new key.
func (sh *shard) slot(key string) int32 {
	if i, ok := sh.idx[key]; ok {
		return i
	}
	var i int32
	if n := len(sh.free); n > 0 {
		i, sh.free = sh.free[n-1], sh.free[:n-1]
	} else {
		i = int32(len(sh.ks))
		sh.ks = append(sh.ks, keyState{})
	}
	sh.ks[i] = keyState{key: key}
	sh.idx[key] = i
	return i
}

// release drops one bucket entry of slot i, freeing the slot with the last one.
func (sh *shard) release(i int32) {
	ks := &sh.ks[i]
	if ks.refs--; ks.refs == 0 {
		delete(sh.idx, ks.key)
		*ks = keyState{}
		sh.free = append(sh.free, i)
	}
}

// Advance moves every window's end to the bucket holding nowSec; ends never move back.
func (s *Set) Advance(nowSec int64) {
	for _, sh := range s.shards {
		sh.mu.Lock()
		for w := range sh.wins {
			sh.advance(w, schemas.FloorDiv(nowSec, sh.wins[w].spec.BucketSeconds))
		}
		sh.mu.Unlock()
	}
}

func (sh *shard) advance(w int, end int64) {
	wn := &sh.wins[w]
	if end <= wn.end {
		return
	}
	n := wn.spec.Buckets
	for b, m := range wn.buckets {
		was := b < wn.end // stored buckets are all >= wn.end-n
		is := b >= end-n && b < end
		switch {
		case was && !is:
			for i, c := range m {
				sh.ks[i].counts[w] -= c
			}
		case !was && is:
			for i, c := range m {
				sh.ks[i].counts[w] += c
			}
		}
		if b < end-n {
			for i := range m {
				sh.release(i)
			}
			delete(wn.buckets, b)
		}
	}
	wn.end = end
}

// Bounds returns window w's event-time range [from, to) in Unix seconds.
func (s *Set) Bounds(w int) (from, to int64) {
	sh := s.shards[0]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	wn := sh.wins[w]
	return (wn.end - wn.spec.Buckets) * wn.spec.BucketSeconds, wn.end * wn.spec.BucketSeconds
}

// Top returns window w's first k entries in list order, merged from each shard's first c
// (c >= k makes the list exact; see the package doc). Keys with no count are never listed.
func (s *Set) Top(w, k, c int) []Entry {
	parts := make([][]Entry, len(s.shards))
	var wg sync.WaitGroup
	for i, sh := range s.shards {
		wg.Go(func() {
			sh.mu.Lock()
			defer sh.mu.Unlock()
			parts[i] = sh.top(w, c)
		})
	}
	wg.Wait()
	all := slices.Concat(parts...)
	slices.SortFunc(all, compare)
	return all[:min(k, len(all))]
}

// top returns the shard's first c entries of window w, in list order.
func (sh *shard) top(w, c int) []Entry {
	if c <= 0 {
		return nil
	}
	h := make(minHeap, 0, c)
	for i := range sh.ks {
		ks := &sh.ks[i]
		n := ks.counts[w]
		// Free slots have no counts; most keys lose to the heap's worst on the count alone.
		if n == 0 || len(h) == c && n < h[0].Count {
			continue
		}
		e := Entry{ks.key, n}
		if len(h) < c {
			heap.Push(&h, e)
		} else if Before(e, h[0]) {
			h[0] = e
			heap.Fix(&h, 0)
		}
	}
	slices.SortFunc(h, compare)
	return h
}

// minHeap keeps the c best entries with the worst of them on top.
type minHeap []Entry

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return Before(h[j], h[i]) }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(Entry)) }
func (h *minHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Stats are sizes for metrics.
type Stats struct {
	Keys, Entries int    // keys held; (key, bucket) counts held
	Dropped       uint64 // events no window took
}

// Stats counts what the set holds.
func (s *Set) Stats() Stats {
	var st Stats
	for _, sh := range s.shards {
		sh.mu.Lock()
		st.Keys += len(sh.idx)
		for _, wn := range sh.wins {
			for _, m := range wn.buckets {
				st.Entries += len(m)
			}
		}
		st.Dropped += sh.dropped
		sh.mu.Unlock()
	}
	return st
}

// Each calls fn with every stored (window, bucket start second, key, count), shard by shard,
// for snapshots. Bucket counts alone rebuild the set (Restore): window totals derive from them.
func (s *Set) Each(fn func(w int, bucketStart int64, key string, n uint64)) {
	for _, sh := range s.shards {
		sh.mu.Lock()
		for w, wn := range sh.wins {
			for b, m := range wn.buckets {
				for i, c := range m {
					fn(w, b*wn.spec.BucketSeconds, sh.ks[i].key, c)
				}
			}
		}
		sh.mu.Unlock()
	}
}

// AddBucket adds n to window w's bucket starting at second bucketStart only (Each's inverse).
func (s *Set) AddBucket(w int, bucketStart int64, key string, n uint64) {
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.put(w, schemas.FloorDiv(bucketStart, sh.wins[w].spec.BucketSeconds), key, n, -1)
}
