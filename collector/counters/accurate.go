package counters

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/platform/fence"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/dedupe"
)

// An accurate namespace writes as an eventual one does (the log, counted by the aggregators); a
// read adds to each counter's total up to its partition's checkpoint the partition's records
// after the checkpoint, read from the log (tail_kafka.go) and folded as the aggregators will
// fold them. So a caller reads its own acknowledged adds at once, whatever has been killed,
// while Kafka and ClickHouse answer.

// snapshot is what an accurate read of some counters found: the SQL condition that keeps each
// counter's rows up to its partition's checkpoint, and each counter's events after it that the
// aggregators will count, in log order.
type snapshot struct {
	upTo   string
	events map[string][]schemas.CounterEvent
}

// snapshot reads the checkpoints of names' partitions, then each partition's records after its
// checkpoint. The rows a checkpoint covers were written with its marker, in one INSERT that
// reached counter_deltas before counter_checkpoints (a materialized view of it), so reading the
// checkpoint first and the rows up to it after gives the total at the checkpoint exactly.
func (e *eventual) snapshot(ctx context.Context, ns counters.Namespace, names []string) (snapshot, error) {
	l, err := e.tail.layout(ctx)
	if err != nil {
		return snapshot{}, err
	}
	byPart := map[int32]map[string]bool{} // the record keys of names, by partition
	for _, n := range names {
		key := schemas.CounterKey(ns.Name, n)
		p := e.tail.partitionOf(l, key)
		if byPart[p] == nil {
			byPart[p] = map[string]bool{}
		}
		byPart[p][string(key)] = true
	}
	cps, fences, err := e.checkpoints(ctx, slices.Collect(maps.Keys(byPart)))
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{upTo: upTo(cps, fences), events: map[string][]schemas.CounterEvent{}}
	for p, cp := range cps {
		evs, err := e.tailEvents(ctx, ns, l, p, cp, byPart[p])
		if err != nil {
			return snapshot{}, err
		}
		for _, ev := range evs {
			s.events[ev.Name] = append(s.events[ev.Name], ev)
		}
	}
	return s, nil
}

// upTo is the condition that keeps, of each partition of cps, the rows up to its checkpoint
// that its fence leaves valid, and every row of the other partitions.
func upTo(cps map[int32]int64, fences map[int32]fence.Fence) string {
	conds := []string{"partition NOT IN (" + joinInts(slices.Collect(maps.Keys(cps))) + ")"}
	for p, cp := range cps {
		conds = append(conds, fmt.Sprintf("(partition = %d AND end_offset <= %d AND NOT (%s))", p, cp, fences[p].AnyInvalidSQL()))
	}
	return "(" + strings.Join(conds, " OR ") + ")"
}

// tailEvents reads partition p's records after its checkpoint cp and keeps, in order, the adds
// and clears of the counters whose record keys are keys that the aggregators will count.
func (e *eventual) tailEvents(ctx context.Context, ns counters.Namespace, l layout, p int32, cp int64, keys map[string]bool) ([]schemas.CounterEvent, error) {
	recs, err := e.tail.read(ctx, l, p, max(cp, 0))
	if err != nil {
		return nil, err
	}
	var evs []schemas.CounterEvent
	for _, r := range recs {
		if !keys[string(r.Key)] {
			continue
		}
		// A record that does not decode is set aside by the aggregators: it counts nothing.
		ev, err := schemas.DecodeCounterEvent(r.Value)
		if err == nil && ev.Op != schemas.CounterDistinct && ev.Generation == ns.Generation {
			evs = append(evs, ev)
		}
	}
	before, err := e.tokensBefore(ctx, p, cp, evs)
	if err != nil {
		return nil, err
	}
	return counted(evs, before), nil
}

// checkpoints reads the checkpoint of each of parts and the fence its batches are judged by
// (package fence: a displaced owner's batch that landed after the claim that displaced it is
// summed by no read, and undone by the aggregators). The checkpoint is the end offset of the
// partition's last batch in counter_checkpoints where the claims leave that batch valid (a row
// from before its epoch was kept, epoch 0, is trusted), else the newest claim's start, which is
// the end of a valid batch; -1 if there is neither. Markers and claims come in one statement:
// the embedded engine's fixed cost per statement is most of a read's.
func (e *eventual) checkpoints(ctx context.Context, parts []int32) (map[int32]int64, map[int32]fence.Fence, error) {
	claims, in := counters.Claims(e.conn), joinInts(parts)
	out := make(map[int32]int64, len(parts))
	fences := make(map[int32]fence.Fence, len(parts))
	for _, p := range parts {
		out[p], fences[p] = -1, fence.New(claims.Ends, nil)
	}
	err := chclient.Each(ctx, e.conn, fmt.Sprintf(`SELECT p, n, last_epoch, last_end, epochs, starts FROM
		(SELECT partition AS p, count() AS n, argMax(epoch, end_offset) AS last_epoch, max(end_offset) AS last_end
			FROM counter_checkpoints WHERE partition IN (%[1]s) GROUP BY partition) AS m
		FULL OUTER JOIN (SELECT partition AS p, groupArray(epoch) AS epochs, groupArray(%[2]s) AS starts
			FROM %[3]s WHERE partition IN (%[1]s) GROUP BY partition) AS c USING (p)`, in, claims.Starts[0], claims.Name),
		nil, func(rows driver.Rows) error {
			var p uint16
			var n, epoch uint64
			var end int64
			var epochs []uint64
			var starts []int64
			if err := rows.Scan(&p, &n, &epoch, &end, &epochs, &starts); err != nil {
				return err
			}
			cs := make([]fence.Claim, len(epochs))
			for i := range cs {
				cs[i] = fence.Claim{Epoch: epochs[i], Start: []int64{starts[i]}}
			}
			f := fence.New(claims.Ends, cs)
			fences[int32(p)] = f
			if c, ok := f.Last(); ok {
				out[int32(p)] = c.Start[0]
			}
			if n > 0 && (epoch == 0 || f.Valid(epoch, end)) {
				out[int32(p)] = max(out[int32(p)], end)
			}
			return nil
		})
	if err != nil {
		return nil, nil, fmt.Errorf("read counter checkpoints: %w", err)
	}
	return out, fences, nil
}

// tokensBefore reads when the tokens of evs were counted in partition p's batches up to its
// checkpoint cp: event times by dedupe key. The keys go tokenChunk at a time, within
// ClickHouse's bound on a query's size.
func (e *eventual) tokensBefore(ctx context.Context, p int32, cp int64, evs []schemas.CounterEvent) (map[uint64][]int64, error) {
	out := map[uint64][]int64{}
	if cp < 0 {
		return out, nil
	}
	keys := make([]uint64, len(evs))
	for i, ev := range evs {
		keys[i] = ev.DedupeKey()
	}
	for chunk := range slices.Chunk(keys, tokenChunk) {
		if err := e.tokensOf(ctx, p, cp, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// tokenChunk is how many keys one token lookup sends: about 100 KB of query.
const tokenChunk = 5000

// tokensOf adds to out the counted tokens of partition p up to cp among keys.
func (e *eventual) tokensOf(ctx context.Context, p int32, cp int64, keys []uint64, out map[uint64][]int64) error {
	err := chclient.Pairs(ctx, e.conn, `SELECT DISTINCT key, toUnixTimestamp64Milli(ts) FROM counter_token_index
		WHERE partition = ? AND key IN (?) AND end_offset <= ?`, []any{uint16(p), keys, cp}, func(k uint64, ts int64) { out[k] = append(out[k], ts) })
	if err != nil {
		return fmt.Errorf("read the tokens counted in counter partition %d: %w", p, err)
	}
	return nil
}

// counted keeps, in order, the events the aggregators will count: an add or a clear unless its
// token was counted within its window, before the checkpoint (before, event times by key) or
// earlier among evs (package dedupe's rule, as the aggregators apply it).
func counted(evs []schemas.CounterEvent, before map[uint64][]int64) []schemas.CounterEvent {
	windows := map[int64]*dedupe.Window{}
	var out []schemas.CounterEvent
	for _, ev := range evs {
		k := ev.DedupeKey()
		if slices.ContainsFunc(before[k], func(t int64) bool { return t-ev.TS < ev.Window && ev.TS-t < ev.Window }) {
			continue
		}
		w := windows[ev.Window]
		if w == nil {
			w = dedupe.New(ev.Window, schemas.CounterGrace)
			windows[ev.Window] = w
		}
		if w.Observe(k, ev.TS) {
			out = append(out, ev)
		}
	}
	return out
}

// fold applies a counter's counted events after the checkpoint to its total at the checkpoint
// (durable): the total they lead to, and what they add to each minute (Unix seconds), a clear
// taking back in its own minute the total before it.
func fold(durable int64, evs []schemas.CounterEvent) (int64, map[int64]int64) {
	total, minutes := durable, map[int64]int64{}
	for _, ev := range evs {
		m := time.UnixMilli(ev.TS).Truncate(time.Minute).Unix()
		if ev.Op == schemas.CounterClear {
			minutes[m] -= total
			total = 0
			continue
		}
		minutes[m] += ev.Delta
		total += ev.Delta
	}
	return total, minutes
}

// joinInts writes ps as a SQL list.
func joinInts(ps []int32) string {
	var b strings.Builder
	for _, p := range ps {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
}
