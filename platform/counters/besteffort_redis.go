package counters

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// BestEffort keeps best_effort counters in Redis: one integer key per counter, which expires the
// namespace's retention after its last write, and one key per idempotency token, which expires
// the namespace's idempotency window after the write it carried. A counter's keys share a hash
// tag, so a script touches one Redis Cluster slot.
type BestEffort struct {
	rdb redis.UniversalClient
}

// NewBestEffort returns the best_effort counters over rdb.
func NewBestEffort(rdb redis.UniversalClient) BestEffort { return BestEffort{rdb: rdb} }

// ErrOverflow is an add that would take a counter past the int64 range.
var ErrOverflow = errors.New("the add would take the counter past the 64-bit range")

// countKey is the counter's key; a namespace created again under its name (a new generation)
// names new keys.
func countKey(ns Namespace, name string) string {
	return "tally:ctr:{" + ns.Name + "@" + strconv.FormatUint(ns.Generation, 36) + "/" + name + "}"
}

func tokenKey(ns Namespace, name, token string) string { return countKey(ns, name) + ":t:" + token }

// addScript applies one add (ARGV[1] = delta) or clear (ARGV[1] = "clear") to KEYS[1] unless the
// token key KEYS[2], when given, already exists: then it changes nothing. It answers the count
// and 1 when it applied, 0 for a repeated token. ARGV[2] and ARGV[3] are the retention and the
// idempotency window, in milliseconds.
var addScript = redis.NewScript(`
if #KEYS == 2 and not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then
  return {tonumber(redis.call('GET', KEYS[1]) or '0'), 0}
end
local n = 0
if ARGV[1] == 'clear' then
  redis.call('SET', KEYS[1], '0', 'PX', ARGV[2])
else
  n = redis.call('INCRBY', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {n, 1}
`)

// Outcome is what an add or a clear did.
type Outcome struct {
	Count     int64 // the counter after it (for a repeated token: now)
	Duplicate bool  // the token was seen within the window: nothing changed
}

// Add adds delta to counter name of ns; a non-empty token makes it count once within the
// namespace's idempotency window.
func (b BestEffort) Add(ctx context.Context, ns Namespace, name string, delta int64, token string) (Outcome, error) {
	return b.run(ctx, ns, name, strconv.FormatInt(delta, 10), token)
}

// Clear sets counter name of ns to zero, once per token as Add does.
func (b BestEffort) Clear(ctx context.Context, ns Namespace, name, token string) (Outcome, error) {
	return b.run(ctx, ns, name, "clear", token)
}

func (b BestEffort) run(ctx context.Context, ns Namespace, name, op, token string) (Outcome, error) {
	keys := []string{countKey(ns, name)}
	if token != "" {
		keys = append(keys, tokenKey(ns, name, token))
	}
	res, err := addScript.Run(ctx, b.rdb, keys, op, ns.Retention.Milliseconds(), ns.IdempotencyWindow.Milliseconds()).Int64Slice()
	if err != nil {
		if strings.Contains(err.Error(), "overflow") {
			return Outcome{}, ErrOverflow
		}
		return Outcome{}, fmt.Errorf("update counter %s/%s: %w", ns.Name, name, err)
	}
	if len(res) != 2 {
		return Outcome{}, fmt.Errorf("update counter %s/%s: got %d values from the script; want 2", ns.Name, name, len(res))
	}
	return Outcome{Count: res[0], Duplicate: res[1] == 0}, nil
}

// Change is one add of a batch.
type Change struct {
	Name  string
	Delta int64
	Token string
}

// AddMany applies changes to counters of ns in one pipeline, each as Add does. It answers how
// many were repeated tokens and the indexes of those that would have overflowed (not applied).
func (b BestEffort) AddMany(ctx context.Context, ns Namespace, changes []Change) (dups int, overflow []int, err error) {
	todo := make([]int, len(changes))
	for i := range todo {
		todo[i] = i
	}
	// A pipelined EVALSHA cannot fall back to EVAL: the adds a Redis without the script refused
	// (NOSCRIPT, so not applied) go again once it is loaded.
	for attempt := 0; len(todo) > 0; attempt++ {
		if attempt > 2 {
			return 0, nil, fmt.Errorf("update counters of %s: Redis keeps answering NOSCRIPT", ns.Name)
		}
		if attempt > 0 {
			if err := addScript.Load(ctx, b.rdb).Err(); err != nil {
				return 0, nil, fmt.Errorf("load the counters script: %w", err)
			}
		}
		cmds := make([]*redis.Cmd, len(todo))
		_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k, i := range todo {
				c := changes[i]
				keys := []string{countKey(ns, c.Name)}
				if c.Token != "" {
					keys = append(keys, tokenKey(ns, c.Name, c.Token))
				}
				cmds[k] = addScript.EvalSha(ctx, p, keys, c.Delta, ns.Retention.Milliseconds(), ns.IdempotencyWindow.Milliseconds())
			}
			return nil
		})
		var again []int
		for k, c := range cmds {
			res, err := c.Int64Slice()
			switch {
			case err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT"):
				again = append(again, todo[k])
			case err != nil && strings.Contains(err.Error(), "overflow"):
				overflow = append(overflow, todo[k])
			case err != nil:
				return 0, nil, fmt.Errorf("update counters of %s: %w", ns.Name, err)
			case len(res) == 2 && res[1] == 0:
				dups++
			}
		}
		todo = again
	}
	slices.Sort(overflow)
	return dups, overflow, nil
}

// Get returns the counts of names in ns, in order; a counter never written (or expired) is 0.
func (b BestEffort) Get(ctx context.Context, ns Namespace, names []string) ([]int64, error) {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = countKey(ns, n)
	}
	// One GET per key keeps every command in one Cluster slot; a pipeline sends them at once.
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read counters of %s: %w", ns.Name, err)
	}
	out := make([]int64, len(keys))
	for i, c := range cmds {
		v, err := c.Int64()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("read counter %s/%s: %w", ns.Name, names[i], err)
		default:
			out[i] = v
		}
	}
	return out, nil
}

// StdErrorBestEffortDistinct is the standard error Redis states for its HyperLogLog (PFCOUNT).
const StdErrorBestEffortDistinct = 0.0081

// distinctKey is the HyperLogLog of counter name's distinct members added in the hour starting
// at hour (Unix seconds).
func distinctKey(ns Namespace, name string, hour int64) string {
	return countKey(ns, name) + ":d:" + strconv.FormatInt(hour, 10)
}

// AddDistinct adds member to counter name's distinct members of the hour of at; the hour's key
// expires the namespace's retention after the hour. Adding a member twice is adding it once.
func (b BestEffort) AddDistinct(ctx context.Context, ns Namespace, name, member string, at time.Time) error {
	hour := at.Unix() - at.Unix()%3600
	k := distinctKey(ns, name, hour)
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.PFAdd(ctx, k, member)
		p.ExpireAt(ctx, k, time.Unix(hour, 0).Add(time.Hour+ns.Retention))
		return nil
	})
	if err != nil {
		return fmt.Errorf("add a distinct member of %s/%s: %w", ns.Name, name, err)
	}
	return nil
}

// Distinct estimates how many distinct members counter name had in the hours from from to to
// (hour-aligned, to excluded), merging the hours' HyperLogLogs in one PFCOUNT.
func (b BestEffort) Distinct(ctx context.Context, ns Namespace, name string, from, to time.Time) (int64, error) {
	var keys []string
	for h := from.Unix(); h < to.Unix(); h += 3600 {
		keys = append(keys, distinctKey(ns, name, h))
	}
	if len(keys) == 0 {
		return 0, nil
	}
	n, err := b.rdb.PFCount(ctx, keys...).Result()
	if err != nil {
		return 0, fmt.Errorf("count distinct members of %s/%s: %w", ns.Name, name, err)
	}
	return n, nil
}
