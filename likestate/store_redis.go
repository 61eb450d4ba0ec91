package likestate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/platform/lease"
	"github.com/tallypipeline/tally/schemas"
)

// Shards is the number of Redis sets an item's likers are spread over, chosen by a hash of the
// user id, so a viral item's set and its writes are split Shards ways instead of one huge key.
// The item's total is kept in one plain key, which every script that changes a set sets to the
// sum of the item's set sizes in the same atomic step; a feed page's totals are then one MGET of
// one key per item (a plain key read costs Redis a fraction of a scripted SCARD, and one key per
// item a sixteenth of one per shard).
const Shards = 16

// Every key of the like state starts with the hash tag {likes}, so in a Redis Cluster the whole
// state sits in one slot, on one primary and its replicas. That is what the state's guarantees
// rest on: a script touches an item's sets, its total and ReadyKey at once (one slot), and an
// applied mark vouches for the changes before it only when both travel in one replication
// stream (AppliedKey). A cluster still spreads the pipeline's other states (view totals, click
// totals, counters) over its nodes; one state's load is bound by one node's.
const tag = "{likes}:"

// Redis keys outside the per-item shards.
const (
	// ReadyKey is set once the serving state holds the whole log; without it (a Redis that
	// came back empty) likes are not served until a rebuild sets it again. Its suffix is the
	// version of the key layout: a collector of a new layout finds no marker and rebuilds from
	// the log over what Redis holds (the replay sets every item's total key), so an upgrade
	// needs no manual step once the old collectors are stopped (docs/ARCHITECTURE.md, which
	// also says what each earlier version left in Redis).
	ReadyKey = tag + "ready:4"
	// rebuildingKey is the lease of the rebuild in progress (its token, with a TTL the rebuild
	// keeps extending): one applier rebuilds at a time, and a FLUSHALL during a rebuild removes
	// it, so that rebuild cannot mark an incomplete state ready.
	rebuildingKey = tag + "rebuilding"
)

// AppliedKey holds the offset up to which the applier applied partition p of the log (the
// offset after the last record of its last batch): the mark that tells the applier, after a
// Redis failover, whether the promoted replica lost changes it had applied (Mark).
func AppliedKey(p int32) string { return tag + "applied:" + strconv.Itoa(int(p)) }

// ErrNotReady means the serving state is being rebuilt from the log. Its message is meant for
// clients as is (it says Public, which the collector's API checks for): a state they can act on.
var ErrNotReady error = notReady{}

type notReady struct{}

func (notReady) Error() string { return "like state is being rebuilt from the log" }

// Public marks the message as fit for clients.
func (notReady) Public() {}

// The scripts below that change a pair take the keys itemKeys returns: the pair's shard's users
// set and offsets hash, the item's total key, ReadyKey, then the users sets of all Shards shards.

// countTotal sets the item's total key (KEYS[3]) to the sum of its sets' sizes (KEYS[5] on),
// deleting it when they are all empty, and leaves the sum in total.
const countTotal = `
total = 0
for i = 5, #KEYS do
  total = total + redis.call('SCARD', KEYS[i])
end
if total == 0 then
  redis.call('DEL', KEYS[3])
else
  redis.call('SET', KEYS[3], total)
end
`

// addTotal adds d, the change the script made to the pair's set (1 added, -1 removed, 0 none),
// to the item's total key and leaves the new total in total. Every script that changes a set
// ends with it, so total and sets cannot part except behind the scripts' backs, which the
// nightly reconciliation finds and repairs with recountScript. A missing key (all sets empty,
// or a Redis of an older layout being replayed over) is counted from the sets instead: sixteen
// SCARDs, too many for every change of a viral item (docs/PERFORMANCE.md, "Likes", has their cost).
// So is a total at or below zero, which only drift can make.
const addTotal = `
local total
if redis.call('EXISTS', KEYS[3]) == 0 then` + countTotal + `elseif d ~= 0 then
  total = redis.call('INCRBY', KEYS[3], d)
  if total <= 0 then` + countTotal + `  end
else
  total = tonumber(redis.call('GET', KEYS[3]))
end
`

// applyScript applies one log record to its pair. KEYS: itemKeys. ARGV: user, offset, '1' like
// / '0' unlike, '1' for the applier (no ready check: it writes while rebuilding). A record at
// or below the stored offset changes nothing: a newer record of the pair already won. Returns
// {is member, item total} on the request path, read in the same atomic step (so the answer
// includes exactly the changes applied before it), and 0 for the applier, which only writes.
const applyScript = `
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[4]) == 0 then
  return redis.error_reply('NOTREADY like state is being rebuilt from the log')
end
local d = 0
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if (not cur) or tonumber(cur) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  if ARGV[3] == '1' then
    d = redis.call('SADD', KEYS[1], ARGV[1])
  else
    d = -redis.call('SREM', KEYS[1], ARGV[1])
  end
end` + addTotal + `
if ARGV[4] == '1' then
  return 0
end
return {redis.call('SISMEMBER', KEYS[1], ARGV[1]), total}
`

// recountScript sets the item's total key to its sets' sizes. KEYS: itemKeys (of any shard).
// It returns the total: a script returning nothing reads as redis.Nil, an error, to go-redis.
const recountScript = `
local total` + countTotal + `
return total
`

// repairScript sets a pair to the state the log had at a snapshot. KEYS: itemKeys. ARGV: user,
// '1'/'0' liked at the snapshot, offset of the pair's last record below the snapshot (empty if
// none), the snapshot's end offset of the item's partition. A stored offset at or above the
// snapshot end means a newer record already won: nothing changes (returns 0).
const repairScript = `
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur and tonumber(cur) >= tonumber(ARGV[4]) then
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
local d
if ARGV[2] == '1' then
  d = redis.call('SADD', KEYS[1], ARGV[1])
else
  d = -redis.call('SREM', KEYS[1], ARGV[1])
end` + addTotal + `
return 1
`

// finishScript marks the state ready if the rebuild holding the lease (KEYS[1], token ARGV[1])
// is still the current one, and frees the lease in the same step. It also raises each
// partition's applied mark (KEYS[3] on) to the end the rebuild read it to (ARGV[2] on), so the
// marks of a state that is ready are never behind what it holds.
const finishScript = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
for i = 3, #KEYS do
  local cur = tonumber(redis.call('GET', KEYS[i]) or '-1')
  if tonumber(ARGV[i-1]) > cur then
    redis.call('SET', KEYS[i], ARGV[i-1])
  end
end
redis.call('SET', KEYS[2], '1')
redis.call('DEL', KEYS[1])
return 1
`

// markScript moves a partition's applied mark (KEYS[1]) to ARGV[2], the end of the batch just
// applied, if the mark stands at least at ARGV[1], where the caller last left it. A mark below
// that (or absent, read as -1) means Redis lost applied changes since (a failover promoted a
// replica that had not received them): it is left as it is and returned as {0, mark}, for the
// caller to apply the log again from there. Otherwise it returns {1, mark after}.
const markScript = `
local cur = tonumber(redis.call('GET', KEYS[1]) or '-1')
if cur < tonumber(ARGV[1]) then
  return {0, cur}
end
if tonumber(ARGV[2]) > cur then
  redis.call('SET', KEYS[1], ARGV[2])
  cur = tonumber(ARGV[2])
end
return {1, cur}
`

// Shard is the shard of an item's likers that holds user.
func Shard(user string) int { return int(xxhash.Sum64String(user) % Shards) }

// UsersKey is the set of users liking item in shard.
func UsersKey(item string, shard int) string {
	return tag + item + ":" + strconv.Itoa(shard) + ":users"
}

// OffsetsKey is the hash user -> offset of the last applied log record, for item's shard.
func OffsetsKey(item string, shard int) string {
	return tag + item + ":" + strconv.Itoa(shard) + ":off"
}

// TotalKey holds item's total: the sum of its users sets' sizes (absent when all are empty).
func TotalKey(item string) string {
	return tag + item + ":total"
}

// itemKeys are the keys of the scripts that change (item, a user of shard): the shard's users
// set and offsets hash, the item's total key, ReadyKey and the users sets of all the item's
// shards.
func itemKeys(item string, shard int) []string {
	keys := make([]string, 0, 4+Shards)
	keys = append(keys, UsersKey(item, shard), OffsetsKey(item, shard), TotalKey(item), ReadyKey)
	for k := range Shards {
		keys = append(keys, UsersKey(item, k))
	}
	return keys
}

// Store reads and writes the like serving state in Redis.
type Store struct {
	rdb                                  redis.UniversalClient
	apply, repair, recount, finish, mark *redis.Script
}

// NewStore returns a store on rdb, which the caller keeps and closes.
func NewStore(rdb redis.UniversalClient) *Store {
	return &Store{
		rdb:     rdb,
		apply:   redis.NewScript(applyScript),
		repair:  redis.NewScript(repairScript),
		finish:  redis.NewScript(finishScript),
		recount: redis.NewScript(recountScript),
		mark:    redis.NewScript(markScript),
	}
}

// Ready reports whether the serving state is complete (ReadyKey present).
func (s *Store) Ready(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, ReadyKey).Result()
	if err != nil {
		return false, fmt.Errorf("check like state ready: %w", err)
	}
	return n == 1, nil
}

// Result is a pair's state after a change and its item's total.
type Result struct {
	Liked bool
	Total int64
}

// Apply applies the request's own log record l at offset (of its partition) and returns the pair's
// state and the item's total, in one script call. It fails with ErrNotReady while the state is
// being rebuilt.
func (s *Store) Apply(ctx context.Context, l schemas.Like, offset int64) (Result, error) {
	vals, err := s.apply.Run(ctx, s.rdb, itemKeys(l.ItemID, Shard(l.UserID)), l.UserID, offset, flag(l.Liked), "0").Int64Slice()
	if err == nil && len(vals) != 2 {
		err = fmt.Errorf("apply script returned %d values; want 2", len(vals))
	}
	if err != nil {
		return Result{}, fmt.Errorf("apply like %s/%s at offset %d: %w", l.ItemID, l.UserID, offset, mapNotReady(err))
	}
	return Result{Liked: vals[0] == 1, Total: vals[1]}, nil
}

// Record is one like record of the log at its position.
type Record struct {
	Partition int32
	Offset    int64
	Like      schemas.Like
}

// Mark is where a batch leaves a partition's applied mark (AppliedKey): Floor is where the
// caller last left it (-1: no mark expected), End the offset after the batch's last record of
// the partition.
type Mark struct {
	Partition  int32
	Floor, End int64
}

// ApplyRecords applies recs in one pipeline without the ready check (the applier writes while
// it rebuilds), then moves each of marks (markScript). Applying a record again changes nothing,
// so a failed batch is retried whole. Redis replicates a primary's writes in order, so a mark
// that survived a failover vouches for every change applied before it, the request path's
// included. behind lists the partitions whose mark was below its Floor, with the mark found
// (-1: none): changes applied there were lost, and the caller applies the log again from it.
func (s *Store) ApplyRecords(ctx context.Context, recs []Record, marks []Mark) (behind map[int32]int64, err error) {
	if len(recs) == 0 && len(marks) == 0 {
		return nil, nil
	}
	var moved []*redis.Cmd
	err = s.withScripts(ctx, func() error {
		pipe := s.rdb.Pipeline()
		for _, r := range recs {
			s.apply.EvalSha(ctx, pipe, itemKeys(r.Like.ItemID, Shard(r.Like.UserID)), r.Like.UserID, r.Offset, flag(r.Like.Liked), "1")
		}
		moved = moved[:0]
		for _, m := range marks {
			moved = append(moved, s.mark.EvalSha(ctx, pipe, []string{AppliedKey(m.Partition)}, m.Floor, m.End))
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err == nil {
		behind, err = markResults(marks, moved)
	}
	if err != nil {
		return nil, fmt.Errorf("apply %d like records and %d marks: %w", len(recs), len(marks), err)
	}
	return behind, nil
}

// markResults reads markScript's answers: the partitions whose mark was behind.
func markResults(marks []Mark, cmds []*redis.Cmd) (map[int32]int64, error) {
	var behind map[int32]int64
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err == nil && len(v) != 2 {
			err = fmt.Errorf("mark script returned %d values; want 2", len(v))
		}
		if err != nil {
			return nil, fmt.Errorf("mark partition %d: %w", marks[i].Partition, err)
		}
		if v[0] == 0 {
			if behind == nil {
				behind = map[int32]int64{}
			}
			behind[marks[i].Partition] = v[1]
		}
	}
	return behind, nil
}

// Behind checks the applied marks of floors' partitions without moving them: the partitions
// whose mark is below the floor, with the mark found (-1: none). The applier asks it while no
// batch comes for a partition, so a lost change is found without waiting for the next like.
func (s *Store) Behind(ctx context.Context, floors map[int32]int64) (map[int32]int64, error) {
	if len(floors) == 0 {
		return nil, nil
	}
	parts := make([]int32, 0, len(floors))
	keys := make([]string, 0, len(floors))
	for p := range floors {
		parts = append(parts, p)
		keys = append(keys, AppliedKey(p))
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("read the applied marks of %d partitions: %w", len(keys), err)
	}
	var behind map[int32]int64
	for i, v := range vals {
		mark := int64(-1)
		if v != nil {
			if mark, err = strconv.ParseInt(v.(string), 10, 64); err != nil {
				return nil, fmt.Errorf("read the applied mark of partition %d: %q: %w", parts[i], v, err)
			}
		}
		if mark < floors[parts[i]] {
			if behind == nil {
				behind = map[int32]int64{}
			}
			behind[parts[i]] = mark
		}
	}
	return behind, nil
}

// Totals returns the exact like total of each item, in one Redis command. It fails with
// ErrNotReady while the state is being rebuilt.
func (s *Store) Totals(ctx context.Context, items []string) (map[string]int64, error) {
	pipe := s.rdb.Pipeline()
	totals := QueueTotals(ctx, pipe, items)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read like totals of %d items: %w", len(items), err)
	}
	return totals()
}

// QueueTotals queues on pipe the read of items' like totals (one MGET of ReadyKey and their
// total keys), so that a caller reading other keys too pays one round trip for all of
// them. The returned function, called after pipe ran, gives the totals, or ErrNotReady while
// the state is being rebuilt.
func QueueTotals(ctx context.Context, pipe redis.Pipeliner, items []string) func() (map[string]int64, error) {
	keys := make([]string, 0, 1+len(items))
	keys = append(keys, ReadyKey)
	for _, it := range items {
		keys = append(keys, TotalKey(it))
	}
	cmd := pipe.MGet(ctx, keys...)
	return func() (map[string]int64, error) {
		vals, err := cmd.Result()
		if err != nil {
			return nil, fmt.Errorf("read like totals of %d items: %w", len(items), err)
		}
		if vals[0] == nil {
			return nil, ErrNotReady
		}
		out := make(map[string]int64, len(items))
		for i, it := range items {
			n, err := parseTotal(vals[1+i])
			if err != nil {
				return nil, fmt.Errorf("read like total of %s: %w", it, err)
			}
			out[it] = n
		}
		return out, nil
	}
}

// LikedBy returns whether user likes each of items, read in one pipeline. It fails with
// ErrNotReady while the state is being rebuilt.
func (s *Store) LikedBy(ctx context.Context, user string, items []string) (map[string]bool, error) {
	shard := Shard(user)
	pipe := s.rdb.Pipeline()
	ready := pipe.Exists(ctx, ReadyKey)
	member := make([]*redis.BoolCmd, len(items))
	for i, it := range items {
		member[i] = pipe.SIsMember(ctx, UsersKey(it, shard), user)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read likes of user %s on %d items: %w", user, len(items), err)
	}
	if ready.Val() != 1 {
		return nil, ErrNotReady
	}
	out := make(map[string]bool, len(items))
	for i, it := range items {
		out[it] = member[i].Val()
	}
	return out, nil
}

// PairState is a pair's serving state: whether the user is in the item's set, and the offset of
// the last record applied to it (HasOffset false when none was).
type PairState struct {
	Liked     bool
	Offset    int64
	HasOffset bool
}

// ItemState is what Redis holds of an item.
type ItemState struct {
	Pairs map[string]PairState // every pair Redis knows of
	Liked int64                // users in the item's sets
	Total int64                // the item's total key: the total reads answer with
}

// ItemStates reads what Redis holds of each item: the members and offsets of all its shards and
// its total key, in one MULTI/EXEC so that they are read together.
func (s *Store) ItemStates(ctx context.Context, items []string) (map[string]ItemState, error) {
	if len(items) == 0 {
		return map[string]ItemState{}, nil
	}
	type shardCmds struct {
		members *redis.StringSliceCmd
		offsets *redis.MapStringStringCmd
	}
	cmds := make([]shardCmds, 0, len(items)*Shards)
	totalKeys := make([]string, len(items))
	var totals *redis.SliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, it := range items {
			for k := range Shards {
				cmds = append(cmds, shardCmds{pipe.SMembers(ctx, UsersKey(it, k)), pipe.HGetAll(ctx, OffsetsKey(it, k))})
			}
			totalKeys[i] = TotalKey(it)
		}
		totals = pipe.MGet(ctx, totalKeys...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read like state of %d items: %w", len(items), err)
	}
	out := make(map[string]ItemState, len(items))
	for i, it := range items {
		st := ItemState{Pairs: map[string]PairState{}}
		for _, c := range cmds[i*Shards : (i+1)*Shards] {
			for user, v := range c.offsets.Val() {
				off, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("read like state of %s: offset %q of user %s: %w", it, v, user, err)
				}
				st.Pairs[user] = PairState{Offset: off, HasOffset: true}
			}
			for _, user := range c.members.Val() {
				p := st.Pairs[user]
				p.Liked = true
				st.Pairs[user] = p
			}
			st.Liked += int64(len(c.members.Val()))
		}
		var err error
		if st.Total, err = parseTotal(totals.Val()[i]); err != nil {
			return nil, fmt.Errorf("read like state of %s: %w", it, err)
		}
		out[it] = st
	}
	return out, nil
}

// parseTotal reads a total key as MGET returns it (nil when absent: no likes).
func parseTotal(v any) (int64, error) {
	if v == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(v.(string), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("total %q: %w", v, err)
	}
	return n, nil
}

// Recount sets item's total key to the sum of its sets' sizes.
func (s *Store) Recount(ctx context.Context, item string) error {
	if err := s.recount.Run(ctx, s.rdb, itemKeys(item, 0)).Err(); err != nil {
		return fmt.Errorf("recount like total of %s: %w", item, err)
	}
	return nil
}

// Repair sets (item, user) to the log's state at a snapshot, want: whether the user likes the
// item, and the offset of the pair's last record below the snapshot (HasOffset false when the
// log has none). snapshotEnd is the snapshot's end offset of the item's partition: a pair whose
// stored offset is at or above it got a newer record since, which wins; Repair then reports
// false and changes nothing.
func (s *Store) Repair(ctx context.Context, item, user string, want PairState, snapshotEnd int64) (bool, error) {
	shard := Shard(user)
	off := ""
	if want.HasOffset {
		off = strconv.FormatInt(want.Offset, 10)
	}
	n, err := s.repair.Run(ctx, s.rdb, itemKeys(item, shard), user, flag(want.Liked), off, snapshotEnd).Int()
	if err != nil {
		return false, fmt.Errorf("repair like state of %s/%s: %w", item, user, err)
	}
	return n == 1, nil
}

// rebuildLease is how long a rebuild holds rebuildingKey without extending it: an applier that
// died mid-rebuild leaves the rebuild to another one after this long.
const rebuildLease = 30 * time.Second

// BeginRebuild takes the rebuild lease; false means another applier is rebuilding. The
// rebuild renews the lease after each chunk it applies: it is lost if Redis is emptied again,
// or if the rebuild stalls for rebuildLease and another applier takes over, and the rebuild
// must then start over.
func (s *Store) BeginRebuild(ctx context.Context) (*lease.Lease, bool, error) {
	l, ok, err := lease.Take(ctx, s.rdb, rebuildingKey, rebuildLease)
	if err != nil {
		return nil, false, fmt.Errorf("begin like state rebuild: %w", err)
	}
	return l, ok, nil
}

// FinishRebuild sets ReadyKey if l's rebuild is still current, and raises the applied marks to
// snap, the ends the rebuild read the log to; false means the state was lost again (or another
// rebuild took over) while rebuilding.
func (s *Store) FinishRebuild(ctx context.Context, l *lease.Lease, snap Snapshot) (bool, error) {
	keys := []string{l.Key(), ReadyKey}
	args := []any{l.Token()}
	for p, end := range snap {
		keys = append(keys, AppliedKey(p))
		args = append(args, end)
	}
	n, err := s.finish.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return false, fmt.Errorf("finish like state rebuild: %w", err)
	}
	return n == 1, nil
}

// withScripts runs fn, the applier's pipeline of EVALSHA, loading its scripts and running
// fn once more if Redis lost its script cache (a restart): pipelined EVALSHA cannot fall back to
// EVAL by itself.
func (s *Store) withScripts(ctx context.Context, fn func() error) error {
	err := fn()
	if !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return mapNotReady(err)
	}
	for _, sc := range []*redis.Script{s.apply, s.mark} {
		if lerr := sc.Load(ctx, s.rdb).Err(); lerr != nil {
			return fmt.Errorf("load like scripts: %w", lerr)
		}
	}
	return mapNotReady(fn())
}

func mapNotReady(err error) error {
	if redis.HasErrorPrefix(err, "NOTREADY") {
		return ErrNotReady
	}
	return err
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
