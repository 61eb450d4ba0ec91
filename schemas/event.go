package schemas

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// MaxIDLen bounds every id (item, viewer, user, event) in bytes.
const MaxIDLen = 128

// FloorDiv is a divided by b rounded down: the bucket of width b that time a falls in, also
// before 1970, where Go's division rounds up. Every stage buckets event times with it, so that a
// view's second, minute or hour is the same everywhere.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Kind is the type of an event.
type Kind uint8

const (
	KindView         Kind = 1
	KindLike         Kind = 2
	KindClick        Kind = 3
	KindFraudVerdict Kind = 4
	// KindCounted is not an event but a batch of deduplicated counts (counted.go).
	KindCounted Kind = 5
	// KindViewCount is an edge server's count of views (view_count.go), on the views topic.
	KindViewCount Kind = 6
)

func (k Kind) String() string {
	switch k {
	case KindView:
		return "view"
	case KindLike:
		return "like"
	case KindClick:
		return "click"
	case KindFraudVerdict:
		return "fraud verdict"
	case KindCounted:
		return "counted"
	case KindViewCount:
		return "view count"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// View is one view of an item. TS is the event time in Unix milliseconds.
type View struct {
	ItemID   string
	ViewerID string
	EventID  string
	TS       int64
}

// Like is one like-state change: Liked true likes, false unlikes. TS is the server time of the
// request in Unix milliseconds; RequestID ties the log record to the request that wrote it.
type Like struct {
	ItemID    string
	UserID    string
	Liked     bool
	TS        int64
	RequestID string
}

// FieldError names the field an input was rejected for.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// CheckID validates an id for field: 1..MaxIDLen bytes of letters, digits and _ . : @ -, so
// ids are safe in URL paths, Redis keys and file names.
func CheckID(field, id string, required bool) error {
	if id == "" {
		if required {
			return &FieldError{field, "is required"}
		}
		return nil
	}
	if len(id) > MaxIDLen {
		return &FieldError{field, fmt.Sprintf("is %d bytes; at most %d allowed", len(id), MaxIDLen)}
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '@' || c == '-') {
			return &FieldError{field, fmt.Sprintf("has character %q at byte %d; allowed: letters, digits and _ . : @ -", c, i)}
		}
	}
	return nil
}

// The event times any record may carry, whatever the clock: [MinEventTS, MaxEventTS) in Unix
// milliseconds (2000-01-01 to 2100-01-01 UTC). The collector's bounds relative to now lie inside
// them; they are what a reader of the log can check without a clock, so that the same record is
// judged the same on every replay, and they keep every time inside what ClickHouse's DateTime
// (1970 to 2106) stores without wrapping.
const (
	MinEventTS int64 = 946_684_800_000
	MaxEventTS int64 = 4_102_444_800_000
)

// checkEventTS checks that ts lies in [MinEventTS, MaxEventTS).
func checkEventTS(ts int64) error {
	if ts < MinEventTS || ts >= MaxEventTS {
		return &FieldError{"ts", fmt.Sprintf("is %d (%s); want a time from 2000-01-01 to 2100-01-01 UTC", ts, time.UnixMilli(ts).UTC().Format(time.RFC3339))}
	}
	return nil
}

// checkStored validates a view read back from the log, where no clock applies: the id rules and
// the fixed time range.
func (v View) checkStored() error {
	if err := CheckID("item_id", v.ItemID, true); err != nil {
		return err
	}
	if err := CheckID("viewer_id", v.ViewerID, true); err != nil {
		return err
	}
	if err := CheckID("event_id", v.EventID, false); err != nil {
		return err
	}
	return checkEventTS(v.TS)
}

// checkStored validates a like read back from the log: item and user ids and a request id of at
// most MaxIDLen bytes of UTF-8. Its time is the server's and only informative, so any is accepted.
func (l Like) checkStored() error {
	if err := CheckID("item_id", l.ItemID, true); err != nil {
		return err
	}
	if err := CheckID("user_id", l.UserID, true); err != nil {
		return err
	}
	if len(l.RequestID) > MaxIDLen {
		return &FieldError{"request_id", fmt.Sprintf("is %d bytes; at most %d allowed", len(l.RequestID), MaxIDLen)}
	}
	if !utf8.ValidString(l.RequestID) {
		return &FieldError{"request_id", "is not UTF-8"} // a Protobuf string must be
	}
	return nil
}

// TimeBounds says which event times are accepted relative to now.
type TimeBounds struct {
	Future time.Duration // at most this far ahead of now
	Late   time.Duration // at most this far behind now
}

// Validate checks v's fields and its time against b at now.
func (v View) Validate(now time.Time, b TimeBounds) error {
	if err := CheckID("item_id", v.ItemID, true); err != nil {
		return err
	}
	if err := CheckID("viewer_id", v.ViewerID, true); err != nil {
		return err
	}
	if err := CheckID("event_id", v.EventID, false); err != nil {
		return err
	}
	if err := checkTS(v.TS, now, b); err != nil {
		return err
	}
	return checkEventTS(v.TS)
}

func checkTS(ts int64, now time.Time, b TimeBounds) error {
	t := time.UnixMilli(ts)
	if d := t.Sub(now); d > b.Future {
		return &FieldError{"ts", fmt.Sprintf("is %s in the future; at most %s allowed", d.Round(time.Second), b.Future)}
	}
	if d := now.Sub(t); d > b.Late {
		return &FieldError{"ts", fmt.Sprintf("is %s old; events older than %s are rejected", d.Round(time.Second), b.Late)}
	}
	return nil
}

// errBadTS is ParseTS's answer for a timestamp in neither accepted form.
var errBadTS = errors.New("want RFC 3339 text or Unix milliseconds")

// ParseTS reads an event time given as RFC 3339 text or as Unix milliseconds.
func ParseTS(s string) (int64, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMilli(), nil
	}
	var ms int64
	if _, err := fmt.Sscan(s, &ms); err == nil && fmt.Sprint(ms) == s {
		return ms, nil
	}
	return 0, errBadTS
}
