package rawlog

import "tally/schemas"

// Row is what every row type has: where its record sits in the log, and its event time.
type Row interface {
	Pos() (partition int32, offset int64)
	EventTS() int64 // Unix milliseconds
}

// ViewRow is a view (topic views). ts is a Parquet timestamp in milliseconds, which ClickHouse
// reads as DateTime64(3).
type ViewRow struct {
	Partition int32  `parquet:"partition"`
	Offset    int64  `parquet:"offset"`
	TS        int64  `parquet:"ts,timestamp(millisecond)"`
	ItemID    string `parquet:"item_id"`
	ViewerID  string `parquet:"viewer_id"`
	EventID   string `parquet:"event_id"`
}

func (r ViewRow) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r ViewRow) EventTS() int64      { return r.TS }

// View is the row's event.
func (r ViewRow) View() schemas.View {
	return schemas.View{ItemID: r.ItemID, ViewerID: r.ViewerID, EventID: r.EventID, TS: r.TS}
}

func decodeView(p int32, off int64, value []byte) (ViewRow, int, error) {
	v, err := schemas.DecodeView(value)
	if err != nil {
		return ViewRow{}, 0, err
	}
	return ViewRow{Partition: p, Offset: off, TS: v.TS, ItemID: v.ItemID, ViewerID: v.ViewerID, EventID: v.EventID},
		20 + len(v.ItemID) + len(v.ViewerID) + len(v.EventID), nil
}

// LikeRow is a like-state change (topic likes).
type LikeRow struct {
	Partition int32  `parquet:"partition"`
	Offset    int64  `parquet:"offset"`
	TS        int64  `parquet:"ts,timestamp(millisecond)"`
	ItemID    string `parquet:"item_id"`
	UserID    string `parquet:"user_id"`
	Liked     bool   `parquet:"liked"`
	RequestID string `parquet:"request_id"`
}

func (r LikeRow) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r LikeRow) EventTS() int64      { return r.TS }

// Like is the row's event.
func (r LikeRow) Like() schemas.Like {
	return schemas.Like{ItemID: r.ItemID, UserID: r.UserID, Liked: r.Liked, TS: r.TS, RequestID: r.RequestID}
}

func decodeLike(p int32, off int64, value []byte) (LikeRow, int, error) {
	l, err := schemas.DecodeLike(value)
	if err != nil {
		return LikeRow{}, 0, err
	}
	return LikeRow{Partition: p, Offset: off, TS: l.TS, ItemID: l.ItemID, UserID: l.UserID, Liked: l.Liked, RequestID: l.RequestID},
		21 + len(l.ItemID) + len(l.UserID) + len(l.RequestID), nil
}
