package rawlog

import "github.com/tallypipeline/tally/schemas"

// Row is what every row type has: where its record sits in the log, and its event time.
type Row interface {
	Pos() (partition int32, offset int64)
	EventTS() int64 // Unix milliseconds
}

// A reader may read a subset of a topic's columns into a struct of its own with the same
// parquet tags (columns are matched by name): the other columns are not decoded, which saves
// a job most of the cost of the strings it does not need (docs/PERFORMANCE.md, "Sink"). The
// nightly jobs' subsets are ViewKey and ClickKey.

// ViewKey is what the views recount reads of a views record: its place in the log, its time,
// its dedupe key and, for an edge view count, what it carries.
type ViewKey struct {
	Partition int32  `parquet:"partition"`
	Offset    int64  `parquet:"offset"`
	TS        int64  `parquet:"ts,timestamp(millisecond)"`
	ItemID    string `parquet:"item_id"`
	ViewerID  string `parquet:"viewer_id"`
	Count     uint64 `parquet:"count"`
	SourceID  string `parquet:"source_id"`
	Seq       uint64 `parquet:"seq"`
}

func (r ViewKey) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r ViewKey) EventTS() int64      { return r.TS }

// IsViewCount reports whether the record is an edge server's view count rather than a view.
func (r ViewKey) IsViewCount() bool { return r.SourceID != "" }

// ClickKey is what the click report reads of a click: its place in the log, its time, its id,
// its ad, campaign and device, and its fraud score.
type ClickKey struct {
	Partition  int32    `parquet:"partition"`
	Offset     int64    `parquet:"offset"`
	TS         int64    `parquet:"ts,timestamp(millisecond)"`
	ClickID    string   `parquet:"click_id"`
	AdID       string   `parquet:"ad_id"`
	CampaignID string   `parquet:"campaign_id"`
	Device     string   `parquet:"device"`
	FraudScore *float64 `parquet:"fraud_score,optional"`
}

func (r ClickKey) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r ClickKey) EventTS() int64      { return r.TS }

// ViewRow is a record of topic views: a view, or an edge server's view count (SourceID set).
// ts is a Parquet timestamp in milliseconds, which ClickHouse reads as DateTime64(3). count is
// the views the row carries: 1 for a view, the count for a view count, whose ts is the start of
// its second and whose viewer_id and event_id are empty; source_id and seq are empty and 0 for a
// view. Files written before view counts existed lack the last three columns (readers take
// them as empty: an ordinary view).
type ViewRow struct {
	Partition int32  `parquet:"partition"`
	Offset    int64  `parquet:"offset"`
	TS        int64  `parquet:"ts,timestamp(millisecond)"`
	ItemID    string `parquet:"item_id"`
	ViewerID  string `parquet:"viewer_id"`
	EventID   string `parquet:"event_id"`
	Count     uint64 `parquet:"count"`
	SourceID  string `parquet:"source_id"`
	Seq       uint64 `parquet:"seq"`
}

func (r ViewRow) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r ViewRow) EventTS() int64      { return r.TS }

// IsViewCount reports whether the row is an edge server's view count rather than a view.
func (r ViewRow) IsViewCount() bool { return r.SourceID != "" }

// View is the row's event, when it is a view.
func (r ViewRow) View() schemas.View {
	return schemas.View{ItemID: r.ItemID, ViewerID: r.ViewerID, EventID: r.EventID, TS: r.TS}
}

// ViewCount is the row's event, when it is a view count.
func (r ViewRow) ViewCount() schemas.ViewCount {
	return schemas.ViewCount{ItemID: r.ItemID, Second: r.TS / 1000, Count: r.Count, SourceID: r.SourceID, Seq: r.Seq}
}

func decodeView(p int32, off int64, value []byte) (ViewRow, int, error) {
	if schemas.RecordKind(value) == schemas.KindViewCount {
		c, err := schemas.DecodeViewCount(value)
		if err != nil {
			return ViewRow{}, 0, err
		}
		return ViewRow{Partition: p, Offset: off, TS: c.TS(), ItemID: c.ItemID, Count: c.Count, SourceID: c.SourceID, Seq: c.Seq},
			36 + len(c.ItemID) + len(c.SourceID), nil
	}
	v, err := schemas.DecodeView(value)
	if err != nil {
		return ViewRow{}, 0, err
	}
	return ViewRow{Partition: p, Offset: off, TS: v.TS, ItemID: v.ItemID, ViewerID: v.ViewerID, EventID: v.EventID, Count: 1},
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

// ClickRow is an ad click (topic clicks). fraud_score is null when the producer gave none.
type ClickRow struct {
	Partition  int32    `parquet:"partition"`
	Offset     int64    `parquet:"offset"`
	TS         int64    `parquet:"ts,timestamp(millisecond)"`
	ClickID    string   `parquet:"click_id"`
	AdID       string   `parquet:"ad_id"`
	CampaignID string   `parquet:"campaign_id"`
	UserHash   string   `parquet:"user_hash"`
	IPHash     string   `parquet:"ip_hash"`
	Device     string   `parquet:"device"`
	FraudScore *float64 `parquet:"fraud_score,optional"`
}

func (r ClickRow) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r ClickRow) EventTS() int64      { return r.TS }

// Click is the row's event.
func (r ClickRow) Click() schemas.Click {
	c := schemas.Click{ClickID: r.ClickID, AdID: r.AdID, CampaignID: r.CampaignID, UserHash: r.UserHash, IPHash: r.IPHash, Device: r.Device, TS: r.TS}
	if r.FraudScore != nil {
		c.FraudScore, c.HasFraudScore = *r.FraudScore, true
	}
	return c
}

func decodeClick(p int32, off int64, value []byte) (ClickRow, int, error) {
	c, err := schemas.DecodeClick(value)
	if err != nil {
		return ClickRow{}, 0, err
	}
	r := ClickRow{Partition: p, Offset: off, TS: c.TS, ClickID: c.ClickID, AdID: c.AdID, CampaignID: c.CampaignID,
		UserHash: c.UserHash, IPHash: c.IPHash, Device: c.Device}
	if c.HasFraudScore {
		r.FraudScore = &c.FraudScore
	}
	return r, 28 + len(c.ClickID) + len(c.AdID) + len(c.CampaignID) + len(c.UserHash) + len(c.IPHash) + len(c.Device), nil
}

// FraudVerdictRow is a fraud verdict on a click (topic fraud_verdicts); its hour is that of
// decided_at. verdict is "fraud" or "valid".
type FraudVerdictRow struct {
	Partition int32  `parquet:"partition"`
	Offset    int64  `parquet:"offset"`
	DecidedAt int64  `parquet:"decided_at,timestamp(millisecond)"`
	ClickID   string `parquet:"click_id"`
	AdID      string `parquet:"ad_id"`
	Verdict   string `parquet:"verdict"`
	Reason    string `parquet:"reason"`
}

func (r FraudVerdictRow) Pos() (int32, int64) { return r.Partition, r.Offset }
func (r FraudVerdictRow) EventTS() int64      { return r.DecidedAt }

func decodeFraudVerdict(p int32, off int64, value []byte) (FraudVerdictRow, int, error) {
	v, err := schemas.DecodeFraudVerdict(value)
	if err != nil {
		return FraudVerdictRow{}, 0, err
	}
	return FraudVerdictRow{Partition: p, Offset: off, DecidedAt: v.DecidedAt, ClickID: v.ClickID, AdID: v.AdID, Verdict: v.Verdict.String(), Reason: v.Reason},
		20 + len(v.ClickID) + len(v.AdID) + len(v.Reason), nil
}
