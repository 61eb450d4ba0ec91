package read

import (
	"context"
	"fmt"
	"time"

	"github.com/axiomhq/hyperloglog"

	"github.com/tallypipeline/tally/schemas/viewersketch"
)

// Unique is an item's unique viewers over a range of whole UTC days: per day (keyed by its
// midnight, Unix seconds; days without viewers absent) and over the whole range.
type Unique struct {
	Days  map[int64]uint64
	Range uint64
	// Bad counts stored sketches left out because they do not decode (the aggregators set the
	// same rows aside in dead_letters when they load them).
	Bad int
}

// uniqueViewers reads item's unique viewers per UTC day of [from, to) and over the range from
// the sketches the views aggregators keep per item and day: each day's latest whole sketch
// (unique_viewers) and the deltas written since its partition's last fold (unique_viewer_deltas
// above sketch_folds; migration 012). A day is the union of its rows, the range the union of its
// days. A union counts no viewer twice, so a delta already folded, or written twice, changes
// nothing. The all-time sketch (day 1970-01-01) is not a day's.
func (s source) uniqueViewers(ctx context.Context, item string, from, to time.Time) (Unique, error) {
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
	u.Days = make(map[int64]uint64, len(days))
	all := hyperloglog.New14()
	for day, sk := range days {
		u.Days[day] = sk.Estimate()
		if err := all.Merge(sk); err != nil {
			return Unique{}, fmt.Errorf("merge unique viewers of %s: %w", item, err)
		}
	}
	u.Range = all.Estimate()
	return u, nil
}
