package read

import (
	"context"
	"fmt"
	"time"

	"github.com/axiomhq/hyperloglog"

	"github.com/tallypipeline/tally/schemas/viewerhours"
	"github.com/tallypipeline/tally/schemas/viewersketch"
)

// Unique is an item's unique viewers over a range of whole minutes, hours or UTC days: per
// bucket (keyed by its start, Unix seconds; buckets without viewers absent) and over the whole
// range.
type Unique struct {
	Buckets map[int64]uint64
	Range   uint64
	// Bad counts stored day sketches left out because they do not decode (the aggregators set
	// the same rows aside in dead_letters when they load them).
	Bad int
}

// uniqueViewers reads item's unique viewers per bucket of g in [from, to) and over the range:
// days from the aggregators' day sketches, hours and minutes from the registers ClickHouse
// keeps per item and hour. Seconds have no sketches: ok is false.
func (s source) uniqueViewers(ctx context.Context, item string, g Granularity, from, to time.Time) (u Unique, ok bool, err error) {
	switch g {
	case Day:
		u, err = s.uniqueDays(ctx, item, from, to)
	case Hour, Minute:
		u, err = s.uniqueHours(ctx, item, g, from, to)
	default:
		return Unique{}, false, nil
	}
	return u, err == nil, err
}

// uniqueHours reads item's unique viewers per hour or minute (g) of [from, to) and over the
// range from the registers the views aggregators send per item and hour (migrations 022, 023,
// package viewerhours): each hour's rows merged by ClickHouse, a minute's registers taken from
// its hour's, the range the union of its buckets. An hour's registers are keyed by register, a
// minute's by minute of the hour and register (viewerhours.MinuteKey).
func (s source) uniqueHours(ctx context.Context, item string, g Granularity, from, to time.Time) (Unique, error) {
	stored, keys, hourFrom := "registers", "arrayMap(k -> toUInt32(k), m.1)", from
	if g == Minute {
		stored, keys, hourFrom = "minutes", "m.1", from.Truncate(time.Hour)
	}
	rows, err := s.conn.Query(ctx, `SELECT toInt64(toUnixTimestamp(hour)), `+keys+`, arrayMap(x -> toUInt16(x), m.2) FROM (
			SELECT hour, maxMap(`+stored+`) AS m FROM unique_viewers_by_hour
			WHERE item_id = ? AND hour >= ? AND hour < ? GROUP BY hour)`+stopAt(ctx), item, hourFrom.UTC(), to.UTC())
	if err != nil {
		return Unique{}, fmt.Errorf("query unique viewers of %s by %s: %w", item, g, err)
	}
	defer rows.Close()
	// A row holds one whole hour, so its buckets are estimated before the next row is read:
	// what is held at once is one hour's sketches, whatever the range.
	u := Unique{Buckets: map[int64]uint64{}}
	var all viewerhours.Registers
	for rows.Next() {
		var hour int64
		var keys []uint32
		var ranks []uint16
		if err := rows.Scan(&hour, &keys, &ranks); err != nil {
			return Unique{}, fmt.Errorf("scan unique viewers of %s by %s: %w", item, g, err)
		}
		buckets := map[int64]*viewerhours.Registers{}
		for i := range min(len(keys), len(ranks)) {
			minute, reg, ok := viewerhours.SplitKey(keys[i])
			t := hour + int64(minute)*60
			if !ok || t < from.Unix() || t >= to.Unix() {
				continue
			}
			if buckets[t] == nil {
				buckets[t] = new(viewerhours.Registers)
			}
			buckets[t].Set(reg, uint8(min(ranks[i], 255)))
		}
		for t, r := range buckets {
			u.Buckets[t] = r.Estimate()
			all.Merge(r)
		}
	}
	if err := rows.Err(); err != nil {
		return Unique{}, fmt.Errorf("read unique viewers of %s by %s: %w", item, g, err)
	}
	u.Range = all.Estimate()
	return u, nil
}

// uniqueDays reads item's unique viewers per UTC day of [from, to) and over the range from
// the sketches the views aggregators keep per item and day: each day's latest whole sketch
// (unique_viewers) and the deltas written since its partition's last fold (unique_viewer_deltas
// above sketch_folds; migration 012). A day is the union of its rows, the range the union of its
// days. A union counts no viewer twice, so a delta already folded, or written twice, changes
// nothing. The all-time sketch (day 1970-01-01) is not a day's.
func (s source) uniqueDays(ctx context.Context, item string, from, to time.Time) (Unique, error) {
	rows, err := s.conn.Query(ctx, `SELECT toInt64(toUnixTimestamp(toDateTime(day, 'UTC'))), sketch FROM (
			SELECT day, argMax(sketch, updated_at) AS sketch FROM unique_viewers
			WHERE item_id = ? AND day >= ? AND day < ? AND day > toDate(0) GROUP BY day
			UNION ALL
			SELECT d.day AS day, d.sketch AS sketch FROM unique_viewer_deltas AS d
			LEFT JOIN (SELECT partition, max(end_offset) AS folded FROM sketch_folds GROUP BY partition) AS f ON d.partition = f.partition
			WHERE d.item_id = ? AND d.day >= ? AND d.day < ? AND d.day > toDate(0) AND d.end_offset > f.folded
		)`+stopAt(ctx), item, from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly),
		item, from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly))
	if err != nil {
		return Unique{}, fmt.Errorf("query unique viewers of %s: %w", item, err)
	}
	defer rows.Close()
	days := map[int64]*hyperloglog.Sketch{}
	var u Unique
	for rows.Next() {
		var day int64
		var blob string
		if err := rows.Scan(&day, &blob); err != nil {
			return Unique{}, fmt.Errorf("scan unique viewers: %w", err)
		}
		sk, err := viewersketch.Decode([]byte(blob))
		if err != nil {
			u.Bad++
			continue
		}
		if days[day] == nil {
			days[day] = sk
		} else if err := days[day].Merge(sk); err != nil {
			return Unique{}, fmt.Errorf("merge unique viewers of %s: %w", item, err)
		}
	}
	if err := rows.Err(); err != nil {
		return Unique{}, fmt.Errorf("read unique viewers of %s: %w", item, err)
	}
	u.Buckets = make(map[int64]uint64, len(days))
	all := hyperloglog.New14()
	for day, sk := range days {
		u.Buckets[day] = sk.Estimate()
		if err := all.Merge(sk); err != nil {
			return Unique{}, fmt.Errorf("merge unique viewers of %s: %w", item, err)
		}
	}
	u.Range = all.Estimate()
	return u, nil
}
