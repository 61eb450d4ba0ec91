package counters

import (
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/platform/fence"
)

// Claims is the claims table of the counter_events partitions (migration 015): the aggregators
// claim partitions in it, and accurate reads judge the stored batches by it.
func Claims(conn driver.Conn) fence.Table {
	return fence.Table{Conn: conn, Name: "counter_partition_claims", Starts: []string{"start_offset"}, Ends: []string{"end_offset"}}
}
