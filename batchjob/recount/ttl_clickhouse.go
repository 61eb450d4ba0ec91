package recount

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ttlDays finds the days of a "TTL second + INTERVAL n DAY" clause in a table's engine
// definition, as ClickHouse prints it (toIntervalDay(n)) or as it was written.
var (
	ttlDays = regexp.MustCompile(`\bTTL\s+second\s*\+\s*(?:toIntervalDay\((\d+)\)|INTERVAL\s+(\d+)\s+DAY)`)
	anyTTL  = regexp.MustCompile(`\bTTL\b`)
)

// deltasTTL reads how long view_deltas keeps a second from the table itself, where the
// aggregator set it (aggregator.ttl_seconds), so that the job needs no aggregator setting to
// know it; zero when the table has no TTL.
func deltasTTL(ctx context.Context, conn driver.Conn) (time.Duration, error) {
	var engine string
	row := conn.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'view_deltas'")
	if err := row.Scan(&engine); err != nil {
		return 0, fmt.Errorf("read the TTL of view_deltas: %w", err)
	}
	return parseDeltasTTL(engine)
}

func parseDeltasTTL(engine string) (time.Duration, error) {
	m := ttlDays.FindStringSubmatch(engine)
	if m == nil {
		if anyTTL.MatchString(engine) {
			return 0, fmt.Errorf("read the TTL of view_deltas: got %q; want TTL second + INTERVAL n DAY", engine)
		}
		return 0, nil
	}
	n, err := strconv.Atoi(m[1] + m[2])
	if err != nil {
		return 0, fmt.Errorf("read the TTL of view_deltas: %w", err)
	}
	return time.Duration(n) * 24 * time.Hour, nil
}
