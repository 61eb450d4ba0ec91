// Package totals keeps per-item totals (views; later clicks) and unique-viewer estimates in
// Redis, so that a feed page's counts are one Redis round trip whatever the catalog size. The
// writer applies each batch's deltas once, guarded by the batch's checkpoint, so a replay after
// a crash never adds a batch twice; ClickHouse stays the source of truth that rebuilds Redis.
//
// Layout (prefix t1:, the layout's version; {name} is e.g. "views", and its braces make it the
// Redis Cluster hash tag, so every key of one Store lands on one node):
//
//	t1:{name}:v:{b}      hash item -> total, b = xxhash64(item) % Buckets
//	t1:{name}:u:{b}      hash item -> unique-viewer estimate, same buckets
//	t1:{name}:guard:{p}  hash epoch, end, chunk: the last chunk applied to partition p
//	                     (pending alone, the rebuilder's epoch, while a rebuild is under way)
//	t1:{name}:ready      marker: every partition has a guard, so the totals are whole
//
// Bucketed hashes rather than a key per item: Buckets is chosen so that a million items leave
// about 60 fields per hash, which Redis keeps listpack-encoded (hash-max-listpack-entries
// ListpackEntries, hash-max-listpack-value ListpackValue; devstack/redisproc sets both): a
// fraction of a key's memory per item, while a HINCRBY still scans a short listpack
// (docs/PERFORMANCE.md, "Redis totals", has the measurements). A field at 0 is deleted, and
// reads never write, so an id nobody viewed costs nothing lasting.
//
// The guard rule: Apply splits a batch into deterministic chunks (items sorted, ChunkItems per
// chunk) and applies each with its guard update in one Lua script. A chunk of (epoch, end,
// chunk index) is applied iff epoch > guard.epoch, or epoch == guard.epoch and (end, chunk) >
// (guard.end, guard.chunk) lexicographically; a chunk of an older epoch is refused with a
// *FencedError (a writer that lost its partition). A replayed batch is therefore skipped, and a
// batch cut short by a crash resumes at its next chunk. A missing guard (Redis lost its data,
// or the partition was never written) refuses Apply with a *NoGuardError: the caller rebuilds
// the partition from ClickHouse with Set, which creates the guard (Repair, which fixes a few
// items of a whole partition, needs the guard and never creates it). A caller that finds Redis
// holding totals of a partition it cannot vouch for (a guard of an epoch its source of truth
// does not know) removes the guard and the ready marker together (Invalidate) and rebuilds;
// Items lists what Redis holds, so that a rebuild also drops the items the source no longer
// has. Epochs and offsets must stay below 2^53 (Lua compares them as doubles).
//
// Concurrency: a Store is safe for concurrent use and owns no goroutines; the Redis client is
// its caller's. One writer per partition (Apply, Claim, Set of partition p) is the caller's
// duty: the epoch fence refuses a stale writer's later writes but does not order two live ones.
// The package knows no component: it is handed names, partitions, epochs and offsets.
package totals

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
)

const (
	// ChunkItems is how many items one guarded Lua call applies: large enough that a batch
	// costs few round trips, small enough that one script holds Redis for only a few milliseconds.
	ChunkItems = 1000
	// Buckets is the number of hashes each of totals and estimates is spread over. Fewer,
	// longer listpacks save little memory and make every HINCRBY scan longer; more save no time
	// (docs/PERFORMANCE.md, "Redis totals").
	Buckets = 16384
	// ListpackEntries and ListpackValue are the hash-max-listpack-entries and
	// hash-max-listpack-value the layout is sized for: up to about 7 million items every
	// bucket stays under ListpackEntries fields, and any valid item id (schemas.MaxIDLen) fits
	// ListpackValue. Beyond them a bucket turns into a hashtable: correct, only larger.
	ListpackEntries = 512
	ListpackValue   = 128
	// AllChunks as a Guard's Chunk means the whole batch ending at End is applied: a rebuild
	// from ClickHouse's checkpoint sets it, so no chunk of that batch is applied again.
	AllChunks = math.MaxInt32
	// Unchecked as Apply's after skips the check that the guard is where the last batch ended:
	// for batches applied from the source of truth relative to the guard itself.
	Unchecked int64 = -2
	// maxExact is the largest epoch or offset Lua compares exactly.
	maxExact = 1 << 53
	prefix   = "t1:"
)

// Guard is partition p's last applied chunk: the batch's epoch, end offset and chunk index.
// Found is false when Redis has no guard for the partition. Pending is the epoch of a rebuild
// under way or cut short (0: none), which fences every older writer's rebuild (Store.Guard
// alone reads it).
type Guard struct {
	Epoch   uint64
	End     int64
	Chunk   int
	Found   bool
	Pending uint64
}

// FencedError refuses a write of an epoch older than the partition's guard.
type FencedError struct {
	Partition  int32
	Epoch      uint64 // the refused writer's
	GuardEpoch uint64 // the guard's, newer
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("partition %d: epoch %d is fenced by epoch %d", e.Partition, e.Epoch, e.GuardEpoch)
}

// BehindError refuses Apply to a partition whose guard is not where the caller left it: Redis
// lost writes it had acknowledged (a failover to a replica that had not received them, a
// restore). The caller catches up from its source of truth, starting at GuardEnd.
type BehindError struct {
	Partition int32
	After     int64 // where the caller's last applied batch ended
	GuardEnd  int64 // where the guard is
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("partition %d: totals guard at offset %d, not at %d where the last applied batch ended (redis lost writes)",
		e.Partition, e.GuardEnd, e.After)
}

// NoGuardError refuses Apply to a partition with no guard: its totals must be rebuilt (Set)
// before deltas mean anything.
type NoGuardError struct{ Partition int32 }

func (e *NoGuardError) Error() string {
	return fmt.Sprintf("partition %d has no totals guard: rebuild it first", e.Partition)
}

// Store is one named set of totals in Redis.
type Store struct {
	rdb   redis.UniversalClient
	base  string // t1:{name}:
	apply *redis.Script
	set   *redis.Script
	claim *redis.Script
	ready *redis.Script

	uniqueRound int // estimates per pipeline of SetUnique: estimatesRound
}

// New returns the totals named name ("views"; later "clicks") in rdb.
func New(rdb redis.UniversalClient, name string) *Store {
	return &Store{rdb: rdb, base: prefix + "{" + name + "}:",
		apply: redis.NewScript(applyScript), set: redis.NewScript(setScript),
		claim: redis.NewScript(claimScript), ready: redis.NewScript(readyScript), uniqueRound: estimatesRound}
}

func bucket(item string) uint64 { return xxhash.Sum64String(item) % Buckets }

func (s *Store) viewsKey(b uint64) string  { return s.base + "v:" + strconv.FormatUint(b, 10) }
func (s *Store) uniqueKey(b uint64) string { return s.base + "u:" + strconv.FormatUint(b, 10) }
func (s *Store) guardKey(p int32) string   { return s.base + "guard:" + strconv.Itoa(int(p)) }
func (s *Store) readyKey() string          { return s.base + "ready" }

// The scripts declare the shebang so that Redis checks for memory before running them: at the
// maxmemory bound a chunk is refused whole, never applied halfway. They answer 1 applied,
// 0 skipped (already applied), -1 fenced (with the guard's epoch), -2 no guard, -3 guard not
// where the caller's last batch ended (with the guard's end).

// applyScript: KEYS[1] guard, KEYS[i] (i >= 2) the bucket of item i-1; ARGV[1..4] epoch, end,
// chunk, after (-2: unchecked); ARGV[2i+1], ARGV[2i+2] item i-1 and its delta. With after
// checked, chunk 0 needs the guard at after and chunk c the guard at (end, c-1).
const applyScript = `#!lua
local g = redis.call('HMGET', KEYS[1], 'epoch', 'end', 'chunk')
if not g[1] then return {-2, 0} end
local ge, gend, gc = tonumber(g[1]), tonumber(g[2]), tonumber(g[3])
local e, en, c, af = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if e < ge then return {-1, g[1]} end
if e == ge and (en < gend or (en == gend and c <= gc)) then return {0, 0} end
if af ~= -2 and ((c == 0 and gend ~= af) or (c > 0 and (gend ~= en or gc ~= c - 1))) then return {-3, g[2]} end
for i = 2, #KEYS do
  if redis.call('HINCRBY', KEYS[i], ARGV[2*i+1], ARGV[2*i+2]) == 0 then
    redis.call('HDEL', KEYS[i], ARGV[2*i+1])
  end
end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'end', ARGV[2], 'chunk', ARGV[3])
return {1, 0}
`

// setScript: KEYS[1] guard, KEYS[2] the ready marker, KEYS[i] (i >= 3) buckets as in
// applyScript; ARGV[1] epoch, ARGV[2] the chunk's step, ARGV[3] end, ARGV[4] chunk; ARGV[2i-1],
// ARGV[2i] item i-2 and its value (0 deletes the field). Steps of a rebuild: "b" begins it: the
// guard's epoch, end and chunk go with the ready marker, and the guard is marked pending with
// the rebuild's epoch, so that until it ends every apply is refused, readers go to the source
// of truth, and a rebuild cut short (its writer died, or a newer owner's rebuild took over)
// leaves no guard over part of the values; "" goes on and "e" ends it (writes epoch, end and
// chunk, drops the mark), both only while the mark is there ("be" for one chunk), so that a
// Redis that lost its data during a rebuild never gets a guard over part of the values. A
// chunk of an epoch older than the guard's or the mark's is fenced. "r", a repair, needs the
// guard at epoch and end already and leaves it as it is.
const setScript = `#!lua
local g = redis.call('HMGET', KEYS[1], 'epoch', 'end', 'pending')
local step = ARGV[2]
if g[1] and tonumber(ARGV[1]) < tonumber(g[1]) then return {-1, g[1]} end
if g[3] and tonumber(ARGV[1]) < tonumber(g[3]) then return {-1, g[3]} end
if step == 'r' then
  if not g[1] then return {-2, 0} end
  if tonumber(g[1]) ~= tonumber(ARGV[1]) or tonumber(g[2]) ~= tonumber(ARGV[3]) then return {-3, g[2]} end
elseif string.sub(step, 1, 1) == 'b' then
  redis.call('HDEL', KEYS[1], 'epoch', 'end', 'chunk')
  redis.call('HSET', KEYS[1], 'pending', ARGV[1])
  redis.call('DEL', KEYS[2])
elseif not g[3] or tonumber(g[3]) ~= tonumber(ARGV[1]) then
  return {-2, 0}
end
for i = 3, #KEYS do
  if ARGV[2*i] == '0' then
    redis.call('HDEL', KEYS[i], ARGV[2*i-1])
  else
    redis.call('HSET', KEYS[i], ARGV[2*i-1], ARGV[2*i])
  end
end
if string.sub(step, -1) == 'e' then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'end', ARGV[3], 'chunk', ARGV[4])
  redis.call('HDEL', KEYS[1], 'pending')
end
return {1, 0}
`

// claimScript: KEYS[1] guard; ARGV[1] epoch. A missing guard stays missing. It answers the
// guard as it found it after the code: {1, 0, epoch, end, chunk}.
const claimScript = `#!lua
local g = redis.call('HMGET', KEYS[1], 'epoch', 'end', 'chunk')
if not g[1] then return {-2, 0} end
if tonumber(ARGV[1]) < tonumber(g[1]) then return {-1, g[1]} end
if tonumber(ARGV[1]) > tonumber(g[1]) then redis.call('HSET', KEYS[1], 'epoch', ARGV[1]) end
return {1, 0, g[1], g[2], g[3]}
`

// readyScript: KEYS[1] marker, KEYS[2..] every partition's guard (a guard only pending, its
// rebuild under way, does not count).
const readyScript = `#!lua
for i = 2, #KEYS do
  if redis.call('HEXISTS', KEYS[i], 'epoch') == 0 then return 0 end
end
redis.call('SET', KEYS[1], '1')
return 1
`

// verdict reads the code and guard epoch that begin a script's answer.
func verdict(res any, p int32, epoch uint64) (int64, error) {
	a, ok := res.([]any)
	if !ok || len(a) < 2 {
		return 0, fmt.Errorf("partition %d: unexpected script answer %v", p, res)
	}
	code, _ := a[0].(int64)
	if code == -1 {
		ge, _ := strconv.ParseUint(fmt.Sprint(a[1]), 10, 64)
		return code, &FencedError{Partition: p, Epoch: epoch, GuardEpoch: ge}
	}
	return code, nil
}

func checkExact(epoch uint64, end int64) error {
	if epoch >= maxExact || end >= maxExact || end < -1 {
		return fmt.Errorf("epoch %d or end %d out of range (want epoch < 2^53, -1 <= end < 2^53)", epoch, end)
	}
	return nil
}

// Apply adds deltas (item -> n, n may be negative) of the batch of partition p that ends at
// offset end, written under epoch. It is applied at most once: in deterministic chunks (items
// sorted, ChunkItems per Lua call) each guarded by (epoch, end, chunk index) as the package doc
// says. after is where the caller's last applied batch of p ended: unless it is Unchecked, the
// guard must be there, or Redis lost acknowledged writes and applying this batch on top would
// skip theirs. Zero deltas are dropped. Returns whether anything was applied; a *FencedError
// when epoch is older than the guard's, a *NoGuardError when p has no guard, a *BehindError
// when the guard is not at after.
func (s *Store) Apply(ctx context.Context, p int32, epoch uint64, after, end int64, deltas map[string]int64) (bool, error) {
	if err := checkExact(epoch, end); err != nil {
		return false, fmt.Errorf("apply totals of partition %d: %w", p, err)
	}
	items := make([]string, 0, len(deltas))
	for it, n := range deltas {
		if n != 0 {
			items = append(items, it)
		}
	}
	slices.Sort(items)
	gk := s.guardKey(p)
	applied := false
	for c, chunk := range chunks(items) {
		keys := make([]string, 1, 1+len(chunk))
		keys[0] = gk
		args := make([]any, 4, 4+2*len(chunk))
		args[0], args[1], args[2], args[3] = epoch, end, c, after
		for _, it := range chunk {
			keys = append(keys, s.viewsKey(bucket(it)))
			args = append(args, it, deltas[it])
		}
		res, err := s.apply.Run(ctx, s.rdb, keys, args...).Result()
		if err != nil {
			return applied, fmt.Errorf("apply totals of partition %d batch %d chunk %d: %w", p, end, c, err)
		}
		code, err := verdict(res, p, epoch)
		if err != nil {
			return applied, fmt.Errorf("apply totals of partition %d batch %d: %w", p, end, err)
		}
		switch code {
		case 1:
			applied = true
		case -2:
			return applied, &NoGuardError{Partition: p}
		case -3:
			ge, _ := strconv.ParseInt(fmt.Sprint(res.([]any)[1]), 10, 64)
			return applied, &BehindError{Partition: p, After: after, GuardEnd: ge}
		}
	}
	return applied, nil
}

// chunks yields items in runs of ChunkItems, numbered from 0; an empty batch is one empty
// chunk, so that it still advances the guard to its end.
func chunks(items []string) func(yield func(int, []string) bool) {
	return func(yield func(int, []string) bool) {
		if len(items) == 0 {
			yield(0, nil)
			return
		}
		c := 0
		for part := range slices.Chunk(items, ChunkItems) {
			if !yield(c, part) {
				return
			}
			c++
		}
	}
}

// Guard returns partition p's guard (Found false when there is none) and the epoch of its
// rebuild under way, if any.
func (s *Store) Guard(ctx context.Context, p int32) (Guard, error) {
	vals, err := s.rdb.HMGet(ctx, s.guardKey(p), "epoch", "end", "chunk", "pending").Result()
	if err != nil {
		return Guard{}, fmt.Errorf("read totals guard of partition %d: %w", p, err)
	}
	var g Guard
	if vals[0] != nil {
		g, err = parseGuard(vals[:3])
	}
	if err == nil && vals[3] != nil {
		g.Pending, err = strconv.ParseUint(fmt.Sprint(vals[3]), 10, 64)
	}
	if err != nil {
		return Guard{}, fmt.Errorf("read totals guard of partition %d: %v: %w", p, vals, err)
	}
	return g, nil
}

// parseGuard reads a found guard's epoch, end and chunk, as Redis answers them.
func parseGuard(vals []any) (Guard, error) {
	g := Guard{Found: true}
	var errs [3]error
	g.Epoch, errs[0] = strconv.ParseUint(fmt.Sprint(vals[0]), 10, 64)
	g.End, errs[1] = strconv.ParseInt(fmt.Sprint(vals[1]), 10, 64)
	g.Chunk, errs[2] = strconv.Atoi(fmt.Sprint(vals[2]))
	if err := errors.Join(errs[:]...); err != nil {
		return Guard{}, err
	}
	return g, nil
}

// Claim raises partition p's guard epoch to epoch, keeping End and Chunk, so that later Applies
// of older epochs are refused, and returns the guard as it found it. Its epoch and End say who
// applied the last batch Redis holds: a writer that lost the partition may have applied a batch
// its successor does not hold (one that landed after the successor's claim) before this claim
// reached Redis, and only the caller's claims can tell. A missing guard stays missing (a
// *NoGuardError, so that the rebuild it calls for is still detected); an epoch older than the
// guard's is a *FencedError.
func (s *Store) Claim(ctx context.Context, p int32, epoch uint64) (Guard, error) {
	if err := checkExact(epoch, 0); err != nil {
		return Guard{}, fmt.Errorf("claim totals of partition %d: %w", p, err)
	}
	res, err := s.claim.Run(ctx, s.rdb, []string{s.guardKey(p)}, epoch).Result()
	var g Guard
	if err == nil {
		g, err = claimed(res, p, epoch)
	}
	if err != nil {
		return Guard{}, fmt.Errorf("claim totals of partition %d: %w", p, err)
	}
	return g, nil
}

// claimed reads claimScript's answer: the guard as the script found it.
func claimed(res any, p int32, epoch uint64) (Guard, error) {
	code, err := verdict(res, p, epoch)
	if err != nil {
		return Guard{}, err
	}
	if code == -2 {
		return Guard{}, &NoGuardError{Partition: p}
	}
	a := res.([]any)
	if len(a) != 5 {
		return Guard{}, fmt.Errorf("partition %d: unexpected claim answer %v", p, res)
	}
	g, err := parseGuard(a[2:])
	if err != nil {
		return Guard{}, fmt.Errorf("partition %d: claim answer %v: %w", p, res, err)
	}
	return g, nil
}

// Set overwrites the totals of the given items (0 deletes the field) and then sets p's guard to
// g (g.Found is ignored), for rebuilds: the guard is created if missing. It is chunked, not
// atomic as a whole: callers hold the partition. The first chunk takes the guard and the ready
// marker away and marks the guard pending with g.Epoch, and every later one needs that mark
// still there: until the last chunk applies are refused and readers go to the source of truth,
// and a rebuild cut short (its writer died, Redis lost its data, a newer owner began its own)
// leaves no guard over part of the values; its later chunks are refused with a *NoGuardError,
// or a *FencedError when a newer owner's guard or mark is there.
func (s *Store) Set(ctx context.Context, p int32, g Guard, values map[string]int64) error {
	return s.overwrite(ctx, p, g, values, rebuild)
}

// Repair overwrites the totals of the given items as Set does, for a few items of a partition
// whose totals are otherwise whole: the guard must already be at g.Epoch and g.End (else a
// *NoGuardError, a *BehindError or a *FencedError, and the caller rebuilds the partition with
// Set), and it stays as it is. A repair never creates a guard: in a Redis that lost its data
// it would vouch for the repaired items alone.
func (s *Store) Repair(ctx context.Context, p int32, g Guard, values map[string]int64) error {
	return s.overwrite(ctx, p, g, values, repair)
}

// overwriteKind says which of Set (rebuild) and Repair an overwrite is.
type overwriteKind uint8

const (
	rebuild overwriteKind = iota
	repair
)

// overwrite is Set or Repair, as kind says, chunk by chunk.
func (s *Store) overwrite(ctx context.Context, p int32, g Guard, values map[string]int64, kind overwriteKind) error {
	if err := checkExact(g.Epoch, g.End); err != nil {
		return fmt.Errorf("set totals of partition %d: %w", p, err)
	}
	items := make([]string, 0, len(values))
	for it := range values {
		items = append(items, it)
	}
	slices.Sort(items)
	last := (len(items) - 1) / ChunkItems
	for c, chunk := range chunks(items) {
		step := "r"
		if kind == rebuild {
			step = ""
			if c == 0 {
				step = "b"
			}
			if c == last || len(items) == 0 {
				step += "e"
			}
		}
		if err := s.overwriteChunk(ctx, p, g, step, chunk, values); err != nil {
			return fmt.Errorf("set totals of partition %d chunk %d: %w", p, c, err)
		}
	}
	return nil
}

// overwriteChunk runs setScript's step on the items of one chunk.
func (s *Store) overwriteChunk(ctx context.Context, p int32, g Guard, step string, chunk []string, values map[string]int64) error {
	keys := make([]string, 2, 2+len(chunk))
	keys[0], keys[1] = s.guardKey(p), s.readyKey()
	args := make([]any, 4, 4+2*len(chunk))
	args[0], args[1], args[2], args[3] = g.Epoch, step, g.End, g.Chunk
	for _, it := range chunk {
		keys = append(keys, s.viewsKey(bucket(it)))
		args = append(args, it, values[it])
	}
	res, err := s.set.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return err
	}
	code, err := verdict(res, p, g.Epoch)
	if err != nil {
		return err
	}
	return setRefusal(code, p, g, res)
}

// setRefusal is the error of setScript's answer code (nil when it wrote).
func setRefusal(code int64, p int32, g Guard, res any) error {
	switch code {
	case -2:
		return &NoGuardError{Partition: p}
	case -3:
		ge, _ := strconv.ParseInt(fmt.Sprint(res.([]any)[1]), 10, 64)
		return &BehindError{Partition: p, After: g.End, GuardEnd: ge}
	}
	return nil
}

// estimatesRound bounds the estimates one pipeline of SetUnique carries: every reply of a pipeline
// must arrive within the client's read timeout, which a busy all-in-one's sketch write of about
// 640,000 estimates in one pipeline once missed, and a catalog's size has no bound.
const estimatesRound = 8192

// SetUnique stores unique-viewer estimates, one HSET (and one HDEL) per bucket, in pipelines of
// at most the store's round of estimates each, one after another. There is no guard: the newest
// estimate wins, and a replay writes estimates of supersets of the views it had seen. An
// estimate of 0 deletes the field. A failed round leaves the rounds before it written: the
// caller writes them all again.
func (s *Store) SetUnique(ctx context.Context, estimates map[string]uint64) error {
	type edits struct {
		set []any // item, estimate, ...
		del []string
	}
	byBucket := map[uint64]*edits{}
	for it, n := range estimates {
		b := bucket(it)
		e := byBucket[b]
		if e == nil {
			e = &edits{}
			byBucket[b] = e
		}
		if n == 0 {
			e.del = append(e.del, it)
		} else {
			e.set = append(e.set, it, n)
		}
	}
	pipe := s.rdb.Pipeline()
	queued := 0
	exec := func() error {
		if queued == 0 {
			return nil
		}
		queued = 0
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("set unique estimates of %d items: %w", len(estimates), err)
		}
		return nil
	}
	for b, e := range byBucket {
		n := len(e.set)/2 + len(e.del)
		if queued+n > s.uniqueRound {
			if err := exec(); err != nil {
				return err
			}
		}
		if len(e.set) > 0 {
			pipe.HSet(ctx, s.uniqueKey(b), e.set...)
		}
		if len(e.del) > 0 {
			pipe.HDel(ctx, s.uniqueKey(b), e.del...)
		}
		queued += n
	}
	return exec()
}

// MarkReadyIfComplete sets the ready marker when guards exist for all partitions
// 0..partitions-1, checked and set in one script, and reports whether it did. Redis that lost
// its data lost the marker too, so readers answer from ClickHouse until every partition was
// rebuilt and this is called again.
func (s *Store) MarkReadyIfComplete(ctx context.Context, partitions int) (bool, error) {
	keys := make([]string, 1, 1+partitions)
	keys[0] = s.readyKey()
	for p := range partitions {
		keys = append(keys, s.guardKey(int32(p)))
	}
	n, err := s.ready.Run(ctx, s.rdb, keys).Int()
	if err != nil {
		return false, fmt.Errorf("mark totals ready over %d partitions: %w", partitions, err)
	}
	return n == 1, nil
}

// Invalidate removes partition p's guard and the ready marker in one command, so that readers
// answer from ClickHouse and every Apply to p is refused (a *NoGuardError) until p is rebuilt
// with Set and MarkReadyIfComplete finds every guard again. For a writer that finds Redis
// holding state it cannot vouch for (a guard of an epoch no ClickHouse claim knows): applying on
// top of it would serve wrong totals as if they were whole.
func (s *Store) Invalidate(ctx context.Context, p int32) error {
	if err := s.rdb.Del(ctx, s.guardKey(p), s.readyKey()).Err(); err != nil {
		return fmt.Errorf("invalidate totals of partition %d: %w", p, err)
	}
	return nil
}

// itemsRound is how many buckets Items reads per round trip.
const itemsRound = 512

// Items calls fn once with every item that has a total or a unique estimate, bucket by bucket
// (one pipeline of HKEYS per itemsRound buckets). A rebuild uses it to find the items Redis
// holds that the source of truth no longer has. It reads every bucket, so it costs a pass over
// all items: for rebuilds, not for reads.
func (s *Store) Items(ctx context.Context, fn func(item string)) error {
	for lo := uint64(0); lo < Buckets; lo += itemsRound {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringSliceCmd, 0, 2*itemsRound)
		for b := lo; b < min(lo+itemsRound, Buckets); b++ {
			cmds = append(cmds, pipe.HKeys(ctx, s.viewsKey(b)), pipe.HKeys(ctx, s.uniqueKey(b)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("list items of totals buckets %d to %d: %w", lo, lo+itemsRound-1, err)
		}
		seen := map[string]bool{}
		for i := 0; i < len(cmds); i += 2 {
			clear(seen)
			for _, it := range append(cmds[i].Val(), cmds[i+1].Val()...) {
				if !seen[it] {
					seen[it] = true
					fn(it)
				}
			}
		}
	}
	return nil
}

// Ready reports whether the ready marker is set.
func (s *Store) Ready(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.readyKey()).Result()
	if err != nil {
		return false, fmt.Errorf("read totals ready marker: %w", err)
	}
	return n == 1, nil
}

// Queue queues on pipe the read of items' totals and unique estimates (one HMGET per bucket
// the page touches, of each hash) and the ready marker. The returned func gives the results,
// in items' order (0 for an unknown item), after pipe.Exec: one round trip for a whole page
// together with whatever else the caller queued (e.g. like totals). Reading writes nothing.
func (s *Store) Queue(ctx context.Context, pipe redis.Pipeliner, items []string) func() (views []int64, unique []uint64, ready bool, err error) {
	type read struct {
		fields        []string
		idx           []int // positions in items of fields
		views, unique *redis.SliceCmd
	}
	byBucket := map[uint64]*read{}
	order := make([]*read, 0, len(items))
	for i, it := range items {
		b := bucket(it)
		r := byBucket[b]
		if r == nil {
			r = &read{}
			byBucket[b] = r
			order = append(order, r)
		}
		r.idx = append(r.idx, i)
		r.fields = append(r.fields, it)
	}
	readyCmd := pipe.Exists(ctx, s.readyKey())
	for b, r := range byBucket {
		r.views = pipe.HMGet(ctx, s.viewsKey(b), r.fields...)
		r.unique = pipe.HMGet(ctx, s.uniqueKey(b), r.fields...)
	}
	return func() ([]int64, []uint64, bool, error) {
		n, err := readyCmd.Result()
		if err != nil {
			return nil, nil, false, fmt.Errorf("read totals ready marker: %w", err)
		}
		views := make([]int64, len(items))
		unique := make([]uint64, len(items))
		for _, r := range order {
			vs, err := r.views.Result()
			if err != nil {
				return nil, nil, false, fmt.Errorf("read totals: %w", err)
			}
			us, err := r.unique.Result()
			if err != nil {
				return nil, nil, false, fmt.Errorf("read unique estimates: %w", err)
			}
			for j, i := range r.idx {
				if views[i], err = parseField[int64](vs[j], strconv.ParseInt); err != nil {
					return nil, nil, false, fmt.Errorf("read total of %s: %w", items[i], err)
				}
				if unique[i], err = parseField[uint64](us[j], strconv.ParseUint); err != nil {
					return nil, nil, false, fmt.Errorf("read unique estimate of %s: %w", items[i], err)
				}
			}
		}
		return views, unique, n == 1, nil
	}
}

// parseField parses an HMGET answer: nil (absent) is 0.
func parseField[T int64 | uint64](v any, parse func(string, int, int) (T, error)) (T, error) {
	if v == nil {
		return 0, nil
	}
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("got %T %v; want a number", v, v)
	}
	return parse(s, 10, 64)
}
