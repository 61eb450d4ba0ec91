package likestate

import (
	"time"

	"github.com/tallypipeline/tally/schemas"
)

// InsertLikes is the statement whose batches AppendLike fills.
const InsertLikes = "INSERT INTO likes (item_id, user_id, liked, partition, offset, ts)"

// AppendLike appends the like record at (partition, offset) of the log with add, which appends a
// row to a batch of InsertLikes (a batch's Append): the one row format of the likes table, for
// the loader and for repairs.
func AppendLike(add func(columns ...any) error, l schemas.Like, partition int32, offset int64) error {
	liked := uint8(0)
	if l.Liked {
		liked = 1
	}
	return add(l.ItemID, l.UserID, liked, uint16(partition), offset, time.UnixMilli(l.TS).UTC())
}
