package likestate

import (
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/schemas"
)

// InsertLikes is the statement whose batches AppendLike fills.
const InsertLikes = "INSERT INTO likes (item_id, user_id, liked, partition, offset, ts)"

// AppendLike appends the like record at (partition, offset) of the log to b, a batch of
// InsertLikes: the one row format of the likes table, for the loader and for repairs.
func AppendLike(b driver.Batch, l schemas.Like, partition int32, offset int64) error {
	liked := uint8(0)
	if l.Liked {
		liked = 1
	}
	return b.Append(l.ItemID, l.UserID, liked, uint16(partition), offset, time.UnixMilli(l.TS).UTC())
}
