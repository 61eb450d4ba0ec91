package counters

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/schemas/dedupe"
)

// markerTTL is how long a batch's marker (its checkpoint row) is kept.
const markerTTL = 30 * 24 * time.Hour

// store reads and writes the counter tables (schemas/migrations/015_counter_events.sql).
type store struct {
	conn driver.Conn
}

// checkpoint is where a partition resumes: the end of its last valid batch and that batch's
// epoch.
type checkpoint struct {
	end   int64
	epoch uint64
	found bool
}

// loadCheckpoint reads partition p's checkpoint from the marker of its last valid batch. A
// partition idle past markerTTL has none left while its counters' rows live on (a namespace keeps
// them up to its retention, 90 days by default): the last valid batch with a row left is then
// its checkpoint. Starting at 0 instead would make every such row a zombie's, deleted by the
// claim (fence.Open), and the counters would lose them. That search reads every row of the
// table's partition column: it runs only for a partition without a marker.
func (s store) loadCheckpoint(ctx context.Context, p int32, invalid string) (checkpoint, error) {
	cp, err := s.lastBatch(ctx, p, "ns = ''", invalid)
	if err == nil && !cp.found {
		cp, err = s.lastBatch(ctx, p, "ns != ''", invalid)
	}
	return cp, err
}

// lastBatch is the end and epoch of partition p's last valid batch among the rows of where.
func (s store) lastBatch(ctx context.Context, p int32, where, invalid string) (checkpoint, error) {
	var cp checkpoint
	var n uint64
	if err := s.conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(), max(end_offset), argMax(epoch, end_offset) FROM counter_deltas
		WHERE %s AND partition = ? AND NOT (%s)`, where, invalid), uint16(p)).Scan(&n, &cp.end, &cp.epoch); err != nil {
		return cp, fmt.Errorf("load checkpoint of counter partition %d: %w", p, err)
	}
	cp.found = n > 0
	return cp, nil
}

// loadDedupe restores partition p's windows as they were at checkpoint cp: each window's
// watermark from the checkpoint batch's rows, then the tokens counted in valid batches up to cp
// that the windows still hold.
func (s store) loadDedupe(ctx context.Context, p *partition, cp checkpoint) error {
	err := chclient.Pairs(ctx, s.conn, `SELECT window_ms, max(toUnixTimestamp64Milli(ts)) FROM counter_tokens
		WHERE partition = ? AND key = 0 AND epoch = ? AND end_offset = ? GROUP BY window_ms`, []any{uint16(p.id), cp.epoch, cp.end},
		func(w, wm int64) { p.window(w).Restore(wm) })
	if err != nil {
		return fmt.Errorf("load dedupe windows of counter partition %d: %w", p.id, err)
	}
	for w, win := range p.windows {
		if err := s.loadTokens(ctx, p, cp, w, win); err != nil {
			return err
		}
	}
	return nil
}

func (s store) loadTokens(ctx context.Context, p *partition, cp checkpoint, window int64, win *dedupe.Window) error {
	err := chclient.Pairs(ctx, s.conn, fmt.Sprintf(`SELECT DISTINCT key, toUnixTimestamp64Milli(ts) FROM counter_tokens
		WHERE partition = ? AND window_ms = ? AND key != 0 AND end_offset <= ? AND toUnixTimestamp64Milli(ts) >= ? AND NOT (%s)`, p.invalid),
		[]any{uint16(p.id), window, cp.end, win.LiveSince()}, win.RestorePair)
	if err != nil {
		return fmt.Errorf("load tokens of counter partition %d: %w", p.id, err)
	}
	return nil
}

// writeTokens stores the counted tokens of parts' batches and each window's watermark at the
// batch's end. Written before the deltas; writing the same rows again is harmless.
func (s store) writeTokens(ctx context.Context, parts []*partition) error {
	return chclient.Insert(ctx, s.conn, "counter tokens", "INSERT INTO counter_tokens (partition, epoch, end_offset, window_ms, key, ts)",
		func(add func(...any) error) error {
			for _, p := range parts {
				for _, t := range p.tokens {
					if err := add(uint16(p.id), p.epoch, p.next, t.window, t.key, time.UnixMilli(t.ts)); err != nil {
						return fmt.Errorf("token of partition %d: %w", p.id, err)
					}
				}
				for w, win := range p.windows {
					if wm := win.Watermark(); wm > 0 {
						if err := add(uint16(p.id), p.epoch, p.next, w, uint64(0), time.UnixMilli(wm)); err != nil {
							return fmt.Errorf("window of partition %d: %w", p.id, err)
						}
					}
				}
			}
			return nil
		})
}

// writeDeltas stores the batches of parts, each partition's deltas and its marker (the
// checkpoint), in one INSERT through the claims fence (migration 015).
func (s store) writeDeltas(ctx context.Context, parts []*partition, now time.Time) error {
	const insert = "INSERT INTO counter_deltas_claimed (partition, epoch, end_offset, ns, generation, name, minute, delta, expires)"
	return chclient.Insert(ctx, s.conn, "counter deltas", insert, func(add func(...any) error) error {
		for _, p := range parts {
			if err := add(uint16(p.id), p.epoch, p.next, "", uint64(0), "", now.Truncate(time.Minute), int64(0), now.Add(markerTTL)); err != nil {
				return fmt.Errorf("marker of partition %d: %w", p.id, err)
			}
			for k, d := range p.deltas {
				if d.sum == 0 {
					continue
				}
				if err := add(uint16(p.id), p.epoch, p.next, k.ns, k.gen, k.name, time.Unix(k.minute, 0), d.sum, time.Unix(d.expires, 0)); err != nil {
					return fmt.Errorf("delta of partition %d: %w", p.id, err)
				}
			}
			for k, c := range p.clears {
				if err := add(uint16(p.id), p.epoch, p.next, k.ns, k.gen, k.name, time.Unix(c.minute, 0), -p.durable[k], time.Unix(c.expires, 0)); err != nil {
					return fmt.Errorf("clear of partition %d: %w", p.id, err)
				}
			}
		}
		return nil
	})
}

// readDurable reads, once per batch, the totals up to the checkpoint of the counters p's batch
// clears: the sums of partition p's valid batches (a counter's adds are all in its partition).
func (s store) readDurable(ctx context.Context, p *partition) error {
	if len(p.clears) == 0 || p.durable != nil {
		return nil
	}
	var conds []string
	var args []any
	for k := range p.clears {
		conds = append(conds, "(ns = ? AND generation = ? AND name = ?)")
		args = append(args, k.ns, k.gen, k.name)
	}
	durable := make(map[counterKey]int64, len(p.clears))
	err := chclient.Each(ctx, s.conn, fmt.Sprintf(`SELECT ns, generation, name, sum(delta) FROM counter_deltas
		WHERE partition = %d AND NOT (%s) AND (%s) GROUP BY ns, generation, name`, p.id, p.invalid, strings.Join(conds, " OR ")), args, func(rows driver.Rows) error {
		var k counterKey
		var sum int64
		if err := rows.Scan(&k.ns, &k.gen, &k.name, &sum); err != nil {
			return err
		}
		durable[k] = sum
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the totals of cleared counters of partition %d: %w", p.id, err)
	}
	p.durable = durable
	return nil
}

// writeMembers adds the distinct members of parts' batches to their counters' hours. Adding a
// member again changes nothing, so a replay needs no care.
func (s store) writeMembers(ctx context.Context, parts []*partition) error {
	const insert = "INSERT INTO counter_distinct_input (ns, generation, name, hour, member, expires)"
	return chclient.Insert(ctx, s.conn, "distinct members", insert, func(add func(...any) error) error {
		for _, p := range parts {
			for _, m := range p.members {
				if err := add(m.ns, m.gen, m.name, time.Unix(m.hour, 0), m.value, time.Unix(m.expires, 0)); err != nil {
					return fmt.Errorf("member of partition %d: %w", p.id, err)
				}
			}
		}
		return nil
	})
}
