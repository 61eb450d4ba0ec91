package read

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/chclient"
)

// Counts are an item's view numbers.
type Counts struct {
	Views         uint64
	UniqueViewers uint64
}

// source reads totals and series from ClickHouse.
type source struct {
	conn driver.Conn
}

// counts returns the all-time views and unique viewers of items in one query; items with no
// views are absent from the map. Views are summed from views_total by item whatever else its
// rows are keyed by (toInt64: the column's type may be signed or not). With a deadline on ctx
// ClickHouse stops the query by then too (stopAt).
func (s source) counts(ctx context.Context, items []string) (map[string]Counts, error) {
	ctx = chclient.FitList(ctx, items, 2)
	rows, err := s.conn.Query(ctx, `SELECT item_id, sum(v), max(u) FROM (
		SELECT item_id, toInt64(sum(views)) AS v, toUInt64(0) AS u FROM views_total WHERE item_id IN (?) GROUP BY item_id
		UNION ALL
		SELECT item_id, toInt64(0), viewers FROM unique_viewers_latest WHERE item_id IN (?) AND day = toDate(0)
	) GROUP BY item_id`+stopAt(ctx), items, items)
	if err != nil {
		return nil, fmt.Errorf("query counts of %d items: %w", len(items), err)
	}
	defer rows.Close()
	out := make(map[string]Counts, len(items))
	for rows.Next() {
		var id string
		var views int64
		var c Counts
		if err := rows.Scan(&id, &views, &c.UniqueViewers); err != nil {
			return nil, fmt.Errorf("scan counts: %w", err)
		}
		c.Views = uint64(max(views, 0))
		out[id] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read counts: %w", err)
	}
	return out, nil
}

// stopAt returns a SETTINGS clause that has ClickHouse stop the query (max_execution_time, in
// whole seconds, rounded up) once ctx's deadline has passed, so that an abandoned read does not
// keep the engine busy; "" without a deadline. It is a clause of the query rather than a
// setting in the context (clickhouse.WithSettings): that would replace the context's other
// settings (chclient.FitList's max_query_size), and clickhouse-go overwrites
// max_execution_time with a longer one of its own when the deadline is over 1 s away.
func stopAt(ctx context.Context) string {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ""
	}
	return fmt.Sprintf(" SETTINGS max_execution_time = %d", max(1, int(math.Ceil(time.Until(deadline).Seconds()))))
}

// Granularity is a series' bucket width.
type Granularity string

const (
	Second Granularity = "second"
	Minute Granularity = "minute"
	Hour   Granularity = "hour"
	Day    Granularity = "day"
)

// Step is the length of one bucket.
func (g Granularity) Step() time.Duration {
	switch g {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	default:
		return 24 * time.Hour
	}
}

// table says where the views of g's buckets are stored.
func (g Granularity) table() (table, column string) {
	switch g {
	case Second:
		return "views_by_second", "second"
	case Minute:
		return "views_by_minute", "minute"
	case Hour:
		return "views_by_hour", "hour"
	default:
		return "views_by_day", "day"
	}
}

// series returns the views per bucket of item in [from, to), bucket starts as Unix seconds.
func (s source) series(ctx context.Context, item string, g Granularity, from, to time.Time) (map[int64]uint64, error) {
	table, col := g.table()
	q := fmt.Sprintf(`SELECT toInt64(toUnixTimestamp(%[2]s)) AS t, toUInt64(greatest(sum(views), 0)) FROM %[1]s
		WHERE item_id = ? AND %[2]s >= ? AND %[2]s < ? GROUP BY t`, table, col)
	lo, hi := from.UTC(), to.UTC()
	args := []any{item, lo, hi}
	if g == Day {
		args = []any{item, lo.Format(time.DateOnly), hi.Format(time.DateOnly)}
	}
	out := map[int64]uint64{}
	if err := chclient.Pairs(ctx, s.conn, q, args, func(t int64, v uint64) { out[t] = v }); err != nil {
		return nil, fmt.Errorf("read %s series of %s: %w", g, item, err)
	}
	return out, nil
}
