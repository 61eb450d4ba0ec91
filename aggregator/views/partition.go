// Package views turns the views topic into exactly-once per-item per-second totals, rollups and
// unique-viewer sketches in ClickHouse (design and proof: docs/EXACTLY_ONCE.md).
//
// Each assigned Kafka partition has its own state: the dedupe window, the batch of deltas built
// since the last flush, and the sketches it touched. A flush writes, for every partition with
// work: first the dedupe state, then the deltas together with the partition's checkpoint marker
// in one INSERT block, so totals and checkpoint change atomically, then the Redis totals. Once
// every sketch interval (longer than the flush interval) a flush starts the sketch deltas (the
// viewers seen since) with the partition's sketch checkpoint after them, written beside the
// consume loop; half an interval later one writes the rollups of the batches since, checks for
// zombies' batches and rewrites a share of the fold cycle's whole sketches. Kafka offsets are
// committed after each flush (advisory, for lag metrics). On assignment both checkpoints, the
// dedupe state and the watermark are loaded back from ClickHouse; consumption resumes at the
// lower checkpoint, and records below the deltas checkpoint only go into the sketches again.
//
// The Aggregator is the stream's rule set (Claim, Apply, Write) on the partition engine it embeds
// (package engine), which owns the lifecycle. Concurrency: the engine calls the rule set under
// its lock, from the consume loop and the group-rebalance callbacks. The Aggregator owns at most one goroutine
// at a time, the sketch write beside the loop: it reads only rows prepared under the lock, ends
// when its statements succeed or the flush's context ends, and every clean stop and revoke waits
// for it.
package views

import (
	"fmt"
	"slices"
	"time"

	"github.com/axiomhq/hyperloglog"
	metro "github.com/dgryski/go-metro"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/platform/fence"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/dedupe"
	"github.com/tallypipeline/tally/schemas/viewerhours"
)

// allTime is the day number under which the all-time sketch of an item is stored (1970-01-01;
// no accepted view is that old).
const allTime = 0

type deltaKey struct {
	item   string
	second int64 // Unix seconds
}

type sketchKey struct {
	item string
	day  int32 // days since the Unix epoch; allTime for the all-time sketch
}

// sketch is one (item, day) sketch a partition holds. A million items hold two each, so its
// fields are laid out small: times as Unix nanoseconds, the flags together.
type sketch struct {
	key     sketchKey
	viewers viewers
	// delta holds the viewers inserted since the sketch's last delta write (empty: the sketch
	// is clean).
	delta viewerDelta
	// estimate is the viewers' last computed estimate, fresh the inserts since (see current),
	// estimatedAt when it was computed and touched when the sketch last took a viewer.
	estimate    uint64
	fresh       uint64
	estimatedAt int64
	touched     int64
	// all is, for a day sketch, the item's all-time sketch, so that a record costs one map
	// lookup rather than two; it is looked up again once evicted (dropped from the map).
	all *sketch
	// loaded says the sketch is merged with its stored version, so writing it loses nothing;
	// unfolded that a delta was written since the whole sketch was last folded into
	// unique_viewers (migration 012): such a sketch stays in memory until its fold; listed
	// that it is in its partition's listed: it owes the next sketch write a row.
	loaded, unfolded, listed, evicted bool
}

// viewerHash is the 64-bit hash a viewer id enters the sketches with. It is the hash axiomhq's
// Insert applies (metro, seed 1337), so sketches stored before and after agree; computing it
// once serves both sketches a view goes into.
func viewerHash(viewer string) uint64 { return metro.Hash64([]byte(viewer), 1337) }

// countedPairs are the dedupe pairs a batch counted and their view times, column by column as
// the batch's dedupe_batches row holds them.
type countedPairs struct {
	pairs []uint64
	lasts []int64
}

func (c *countedPairs) add(pair uint64, last int64) {
	c.pairs = append(c.pairs, pair)
	c.lasts = append(c.lasts, last)
}

func (c *countedPairs) len() int { return len(c.pairs) }

func (c *countedPairs) reset() {
	c.pairs, c.lasts = c.pairs[:0], c.lasts[:0]
}

// partition is the state of one assigned Kafka partition.
type partition struct {
	id       int32
	win      *dedupe.Window
	next     int64 // offset after the last processed record: end of the pending batch
	flushed  int64 // deltas checkpoint: end offset of the last batch written
	sketched int64 // sketch checkpoint: records below it are in the stored sketches
	// Folds (migration 012): every delta of this partition up to folded is in unique_viewers.
	// A fold cycle rewrites the whole sketch of each key in foldQueue (those with deltas up to
	// foldFrom not yet folded), foldChunk of them per sketch interval; once the queue is empty
	// the cycle's end, foldFrom, becomes the fold checkpoint.
	folded    int64
	foldFrom  int64
	foldQueue []sketchKey
	foldChunk int
	// inherited are the keys with deltas above the fold checkpoint at the claim, earlier owners'
	// (the first fold cycle folds them): the only keys a sketch new to memory can have stored
	// deltas of that unique_viewers lacks. This owner's deltas keep their sketch in memory until
	// it is folded (takeDeltas evicts folded sketches alone), and a fold's whole sketch holds
	// them. Nil once that first cycle ended.
	inherited map[sketchKey]bool
	records   int // records in the pending batch
	deltas    map[deltaKey]uint64
	counted   countedPairs
	// edgeViews is how many more views than records the batch's counted view counts carry
	// (their counts less one each), for the counted-views metric.
	edgeViews uint64
	// sketches touched since assignment; clean ones idle for a while are dropped. A sketch
	// write's work follows the sketches touched, not all those held (at a million items,
	// millions): unloaded are those created since the last load of stored versions, listed
	// those that owe the next write a row (a delta, or an estimate skipped while they took
	// viewers).
	sketches  map[sketchKey]*sketch
	unloaded  []*sketch
	listed    []*sketch
	lastEvict time.Time
	// hours are the unique-viewer registers per (item, hour), minute by minute, set since the last sketch write
	// (hours.go).
	hours  map[hourKey]*viewerhours.Hour
	poison int                 // records set aside in this batch
	dead   []deadletter.Letter // their dead letters, written before the batch (deadletter.go)

	// Fencing (docs/EXACTLY_ONCE.md, "Zombie aggregators"): the epoch this owner claimed, the
	// checkpoint it claimed from, the claims that decide which batches are valid, and the
	// zombie batches already undone, with when they were first undone.
	epoch  uint64
	start  int64
	fence  fence.Fence
	undone map[batchRef]time.Time
	// rolled is the offset up to which the rollups are known to hold this partition's batches;
	// rollups holds the views of the batches written since (rolled to flushed) per item and
	// minute, the finest bucket of any rollup, unless rollupsLost: a batch among them is not
	// in it (its deltas' outcome was unknown), and they are repaired from the deltas instead.
	rolled      int64
	rollups     map[deltaKey]int64
	rollupsLost bool
	// redisEnd is the checkpoint Redis's item totals are known to hold (-1: unknown), and
	// redisClaimed whether Redis's guard carries this owner's epoch.
	redisEnd     int64
	redisClaimed bool
	// redisStale says that Redis's totals of the partition cannot be vouched for (the stores
	// disagreed about its epochs when it was claimed): they are rebuilt from ClickHouse, with
	// readers sent there meanwhile, before anything is applied on top of them.
	redisStale bool
	// countedEnd is the checkpoint the counted topic is known to hold (-1: unknown).
	countedEnd int64
	// countedLast is the counted topic's last batch of the partition as read when it was
	// claimed, for the first catch-up (nil: read it then).
	countedLast *countedLast
}

// ID, Epoch and Batched are the partition as the engine reads it.
func (p *partition) ID() int32     { return p.id }
func (p *partition) Epoch() uint64 { return p.epoch }
func (p *partition) Batched() int  { return p.records }

// newPartition starts a partition whose deltas are written up to flushed and whose sketches
// are stored up to sketched; it resumes at the lower of the two.
func newPartition(id int32, window, grace time.Duration, flushed, sketched int64) *partition {
	return &partition{
		id:         id,
		win:        dedupe.New(window.Milliseconds(), grace.Milliseconds()),
		next:       min(flushed, sketched),
		flushed:    flushed,
		sketched:   sketched,
		deltas:     make(map[deltaKey]uint64),
		sketches:   make(map[sketchKey]*sketch),
		hours:      make(map[hourKey]*viewerhours.Hour),
		undone:     make(map[batchRef]time.Time),
		rollups:    make(map[deltaKey]int64),
		redisEnd:   -1,
		countedEnd: -1,
	}
}

// process applies one record at offset. Records that do not decode or validate cannot be
// counted; they are set aside the same way on every replay, so they never make two runs
// disagree. A record below the deltas checkpoint is already counted (and in the restored dedupe
// state) and is replayed only because the sketches were written before it: it goes into the
// sketches alone.
func (p *partition) process(offset int64, value []byte, now time.Time) {
	p.next = offset + 1
	if schemas.RecordKind(value) == schemas.KindViewCount {
		p.processCount(offset, value)
		return
	}
	v, err := schemas.DecodeView(value)
	counted := offset >= p.flushed
	if counted {
		p.records++
	}
	if err != nil {
		if counted {
			p.poison++
			p.setAside(offset, value, err)
		}
		return
	}
	h := viewerHash(v.ViewerID)
	ds := p.sketch(sketchKey{v.ItemID, int32(schemas.FloorDiv(v.TS, 86_400_000))})
	if ds.all == nil || ds.all.evicted {
		ds.all = p.sketch(sketchKey{v.ItemID, allTime})
	}
	p.insert(ds, h, now)
	p.insert(ds.all, h, now)
	p.addMinute(v.ItemID, v.TS, h)
	if !counted {
		return
	}
	if key := dedupe.Key(v.ViewerID, v.ItemID); p.win.Observe(key, v.TS) {
		p.counted.add(key, v.TS)
		p.deltas[deltaKey{v.ItemID, schemas.FloorDiv(v.TS, 1000)}]++
	}
}

// processCount applies an edge server's view count at offset: counted once per (source, seq)
// by the same dedupe window as views, under a key no viewer pair can have (dedupe.CountKey), so
// its state is checkpointed and restored with theirs. It adds its count to the item's second
// and touches no sketch: it names no viewer.
func (p *partition) processCount(offset int64, value []byte) {
	if offset < p.flushed {
		return
	}
	p.records++
	c, err := schemas.DecodeViewCount(value)
	if err != nil {
		p.poison++
		p.setAside(offset, value, err)
		return
	}
	if key := dedupe.CountKey(c.SourceID, c.Seq); p.win.Observe(key, c.TS()) {
		p.counted.add(key, c.TS())
		p.deltas[deltaKey{c.ItemID, c.Second}] += c.Count
		p.edgeViews += c.Count - 1
	}
}

// sketch returns the sketch of k, created empty (and unloaded) if the partition holds none.
func (p *partition) sketch(k sketchKey) *sketch {
	s := p.sketches[k]
	if s == nil {
		s = &sketch{key: k}
		p.sketches[k] = s
		p.unloaded = append(p.unloaded, s)
	}
	return s
}

// insert adds a viewer to s, one of p's sketches, by its viewerHash.
func (p *partition) insert(s *sketch, h uint64, now time.Time) {
	p.list(s)
	s.insert(h, now)
}

// loadedAll records that every sketch created so far holds its stored version.
func (p *partition) loadedAll() {
	for _, s := range p.unloaded {
		s.loaded = true
	}
	clear(p.unloaded)
	p.unloaded = p.unloaded[:0]
}

// list puts s among the sketches that owe the next sketch write a row.
func (p *partition) list(s *sketch) {
	if !s.listed {
		s.listed = true
		p.listed = append(p.listed, s)
	}
}

// insert adds a viewer by its viewerHash.
func (s *sketch) insert(h uint64, now time.Time) {
	s.viewers.add(h)
	s.delta.add(h)
	s.fresh++
	s.touched = now.UnixNano()
}

// dirty reports whether the sketch took viewers since its last delta write.
func (s *sketch) dirty() bool { return !s.delta.empty() }

// viewers is a sketch's whole set of viewers: their hashes while at most fewViewers distinct,
// a HyperLogLog sketch from then on. Most items of a large catalog take a handful of viewers a
// day, and a sketch of their own cost each of them several allocations and hundreds of bytes
// that the collector then scans. Below fewViewers the estimate is the count of distinct hashes,
// which is what the sketch's sparse form answers for so few (bar two hashes alike in their
// first 25 bits).
type viewers struct {
	few []uint64
	hll *hyperloglog.Sketch
}

// fewViewers is how many distinct viewers a sketch holds as hashes (128 bytes).
const fewViewers = 16

func (v *viewers) add(h uint64) {
	switch {
	case v.hll != nil:
		v.hll.InsertHash(h)
	case slices.Contains(v.few, h):
	case len(v.few) < fewViewers:
		v.few = append(v.few, h)
	default:
		v.dense().InsertHash(h)
	}
}

// dense turns v into its HyperLogLog sketch, for a stored sketch to be merged into, and
// returns it.
func (v *viewers) dense() *hyperloglog.Sketch {
	if v.hll == nil {
		v.hll, v.few = sketchOf(v.few), nil
	}
	return v.hll
}

func (v *viewers) estimate() uint64 {
	if v.hll != nil {
		return v.hll.Estimate()
	}
	return uint64(len(v.few))
}

// marshal encodes v in the stored form, a HyperLogLog sketch's.
func (v *viewers) marshal() ([]byte, error) {
	if v.hll != nil {
		return v.hll.MarshalBinary()
	}
	return sketchOf(v.few).MarshalBinary()
}

// sketchOf returns a new HyperLogLog sketch of the viewers with these hashes.
func sketchOf(hashes []uint64) *hyperloglog.Sketch {
	s := hyperloglog.New14()
	for _, h := range hashes {
		s.InsertHash(h)
	}
	return s
}

// viewerDelta holds the viewers a sketch took since its last delta write: their hashes while
// few, a sketch of them past deltaHashes, so that a delta held through failed writes stays
// small. Hashes rather than a sketch from the first viewer: at a million items nearly every
// touched key takes one or two viewers per interval, and a sketch of its own cost five
// allocations each; the write encodes the delta beside the consume loop.
type viewerDelta struct {
	hashes []uint64
	hll    *hyperloglog.Sketch
}

// deltaHashes is how many hashes a delta holds before it turns into a sketch (4 KiB; a dense
// sketch is 16).
const deltaHashes = 512

func (d *viewerDelta) add(h uint64) {
	if d.hll != nil {
		d.hll.InsertHash(h)
		return
	}
	d.hashes = append(d.hashes, h)
	if len(d.hashes) >= deltaHashes {
		d.hll = d.sketch()
		d.hashes = nil
	}
}

func (d viewerDelta) empty() bool { return d.hll == nil && len(d.hashes) == 0 }

// merge adds o's viewers to d.
func (d *viewerDelta) merge(o viewerDelta) error {
	for _, h := range o.hashes {
		d.add(h)
	}
	if o.hll == nil {
		return nil
	}
	if d.hll == nil {
		d.hll, d.hashes = d.sketch(), nil
	}
	return d.hll.Merge(o.hll)
}

// sketch returns the delta's viewers as a sketch: its own, or a new one of its hashes.
func (d viewerDelta) sketch() *hyperloglog.Sketch {
	if d.hll != nil {
		return d.hll
	}
	return sketchOf(d.hashes)
}

// estimateEvery is how long a sketch's estimate is reused while it takes new viewers. An
// estimate costs a pass over the sketch (a sparse sketch's pending inserts merged into its
// list, or a dense sketch's 16,384 registers: about 0.3 ms), and every touched sketch is
// written every sketch interval: estimating each at every interval cost more than 0.3 s per
// interval at 10,000 busy items (docs/PERFORMANCE.md, "Go benchmarks").
const estimateEvery = 30 * time.Second

// estimateDue reports whether the sketch's estimate is to be computed again: it has none (new,
// or just merged with its stored version), or it took new viewers, and then at once while it is
// below 100 (a few changed viewers are a visible change there), else once they reach 1% of it
// and the last is older than estimateEvery. A final write (the partition leaves this owner: a
// revoke, a clean stop) computes every estimate owed: the next owner does not know which of
// the stored ones are stale, and rewrites them only at their fold.
func (s *sketch) estimateDue(now time.Time, final bool) bool {
	return s.estimate == 0 || s.fresh > 0 && (final || s.estimate < 100 || s.fresh*100 >= s.estimate && now.UnixNano()-s.estimatedAt >= int64(estimateEvery))
}

// current returns the sketch's estimate, computed again when due.
func (s *sketch) current(now time.Time, final bool) uint64 {
	if s.estimateDue(now, final) {
		s.estimateNow(now)
	}
	return s.estimate
}

// estimateNow computes the sketch's estimate.
func (s *sketch) estimateNow(now time.Time) uint64 {
	s.estimate, s.fresh, s.estimatedAt = s.viewers.estimate(), 0, now.UnixNano()
	return s.estimate
}

// owesRow reports whether a sketch write has a row for the sketch: its delta, or an estimate it
// owes.
func (s *sketch) owesRow(now time.Time, final bool) bool {
	return s.dirty() || s.owesEstimate(now, final)
}

// owesEstimate reports whether a sketch with no new viewers since its last write holds an
// estimate to write: one skipped while it took them.
func (s *sketch) owesEstimate(now time.Time, final bool) bool {
	return !s.dirty() && s.fresh > 0 && s.estimateDue(now, final)
}

// itemDeltas sums the pending batch's deltas per item.
func (p *partition) itemDeltas() map[string]int64 {
	out := make(map[string]int64, len(p.deltas))
	for k, n := range p.deltas {
		out[k.item] += int64(n)
	}
	return out
}

// addRollups adds the pending batch's deltas, per minute, to the rollups still to write.
func (p *partition) addRollups() {
	for k, n := range p.deltas {
		p.rollups[deltaKey{k.item, schemas.FloorDiv(k.second, 60) * 60}] += int64(n)
	}
}

// rolledAll records that the rollups hold every batch written.
func (p *partition) rolledAll() {
	p.rolled = p.flushed
	clear(p.rollups)
	p.rollupsLost = false
}

// pending reports whether records were counted since the last flush.
func (p *partition) pending() bool { return p.next > p.flushed }

// sketchesPending reports whether records went into the sketches since they were last written,
// or a sketch owes an estimate (any it took viewers since, for a final write: estimateDue).
func (p *partition) sketchesPending(now time.Time, final bool) bool {
	if p.next > p.sketched {
		return true
	}
	for _, s := range p.listed {
		if !s.evicted && s.owesEstimate(now, final) {
			return true
		}
	}
	return false
}

// takeDeltas hands over the sketches' deltas for writing, leaving them clean (their viewers
// are then owed to unique_viewers by the next fold), and keeps listed only the sketches that
// still owe an estimate. It drops the folded sketches idle for longer than idle (a later view
// reloads the stored version before its next delta is written). The sketch
// checkpoint moves only once the write succeeds; if it fails, restoreDeltas gives the deltas
// back.
func (p *partition) takeDeltas(now time.Time, idle time.Duration) []takenDelta {
	var taken []takenDelta
	kept := p.listed[:0]
	for _, s := range p.listed {
		if s.dirty() {
			taken = append(taken, takenDelta{s, s.delta})
			s.delta, s.unfolded = viewerDelta{}, true
		}
		if s.listed = !s.evicted && s.fresh > 0; s.listed {
			kept = append(kept, s)
		}
	}
	clear(p.listed[len(kept):])
	p.listed = kept
	for k, s := range p.sketches {
		if !s.unfolded && !s.dirty() && now.UnixNano()-s.touched > int64(idle) {
			delete(p.sketches, k)
			s.evicted = true
		}
	}
	return taken
}

// takenDelta is a delta takeDeltas handed over, and its sketch.
type takenDelta struct {
	s     *sketch
	delta viewerDelta
}

// restoreDeltas gives back deltas taken for a write that failed, so that the next write holds
// them. A sketch no longer in memory was folded since, with them, and dropped: nothing is owed.
func (p *partition) restoreDeltas(taken []takenDelta) error {
	for _, t := range taken {
		s := t.s
		if s.evicted {
			continue
		}
		p.list(s)
		if s.delta.empty() {
			s.delta = t.delta
			continue
		}
		if err := s.delta.merge(t.delta); err != nil {
			return fmt.Errorf("restore sketch delta of %s day %d: %w", s.key.item, s.key.day, err)
		}
	}
	return nil
}

// foldTake returns the keys whose whole sketches are folded at this sketch interval. With no
// cycle under way it starts one: the cycle ends at the current sketch checkpoint and queues
// every key with deltas not yet folded, spread over rounds intervals. Keys that get new deltas
// during the cycle are folded with them or, if already taken, queued by the next cycle.
func (p *partition) foldTake(rounds int) []sketchKey {
	if len(p.foldQueue) == 0 && p.foldFrom <= p.folded {
		var keys []sketchKey
		for k, s := range p.sketches {
			if s.unfolded {
				keys = append(keys, k)
			}
		}
		p.startFold(p.sketched, keys, rounds)
	}
	n := min(max(p.foldChunk, 1), len(p.foldQueue))
	take := p.foldQueue[:n:n]
	p.foldQueue = p.foldQueue[n:]
	return take
}

// startFold starts a fold cycle that ends at from and folds keys over rounds sketch intervals.
func (p *partition) startFold(from int64, keys []sketchKey, rounds int) {
	p.foldFrom, p.foldQueue = from, keys
	p.foldChunk = (len(keys) + rounds - 1) / max(rounds, 1)
}

// foldDone reports whether the cycle under way folded its last key: its end is then the fold
// checkpoint to record.
func (p *partition) foldDone() bool { return len(p.foldQueue) == 0 && p.foldFrom > p.folded }

// markFlushed resets the batch after it was written up to end.
func (p *partition) markFlushed(end int64, now time.Time) {
	p.flushed = end
	p.records = 0
	p.poison = 0
	clear(p.deltas)
	p.counted.reset()
	p.edgeViews = 0
	if now.Sub(p.lastEvict) > 30*time.Second {
		p.win.Evict()
		p.lastEvict = now
	}
}

// zombiesFrom is the offset after which p's owner looks for zombies' batches at now: its own
// start, or lower while claims of the last zombieLookback started lower (fence.lookback).
// Computed at each look, so that once those claims are older the look costs no more than one
// from its own start.
func (p *partition) zombiesFrom(now time.Time) int64 {
	return p.fence.Lookback(now.Add(-zombieLookback), p.start)
}
