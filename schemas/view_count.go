package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ViewCount is an edge server's pre-aggregated count of one item's views in one second, for
// traffic too large to send view by view (docs/ARCHITECTURE.md, "Edge view counts"). It is
// counted once per (SourceID, Seq), however often it is retried, and adds Count to the item's
// totals; it carries no viewer, so it takes no part in per-viewer dedupe or unique viewers.
type ViewCount struct {
	ItemID   string
	Second   int64 // Unix seconds
	Count    uint64
	SourceID string // the edge server
	Seq      uint64 // the source's sequence number of this record; a retry repeats it
}

// MaxViewCount bounds one record's count: more views of one item in one second from one source
// is a bug, not traffic, and the bound keeps every sum far from overflow.
const MaxViewCount = 1_000_000_000

// TS is the record's event time in Unix milliseconds: the start of its second.
func (c ViewCount) TS() int64 { return c.Second * 1000 }

// Validate checks c's fields, and its second against b at now as a view's ts is checked.
func (c ViewCount) Validate(now time.Time, b TimeBounds) error {
	if err := c.checkStored(); err != nil {
		return err
	}
	return asField("second", checkTS(c.TS(), now, b))
}

// checkStored validates a view count read back from the log: ids, count and the fixed time
// range.
func (c ViewCount) checkStored() error {
	if err := CheckID("item_id", c.ItemID, true); err != nil {
		return err
	}
	if c.Second < MinEventTS/1000 || c.Second >= MaxEventTS/1000 {
		return &FieldError{"second", fmt.Sprintf("is %d; want Unix seconds from 2000-01-01 to 2100-01-01 UTC", c.Second)}
	}
	if c.Count < 1 || c.Count > MaxViewCount {
		return &FieldError{"count", fmt.Sprintf("is %d; want 1 to %d", c.Count, MaxViewCount)}
	}
	return CheckID("source_id", c.SourceID, true)
}

// asField renames a FieldError's field (the time checks name "ts").
func asField(field string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &FieldError{field, fe.Reason}
	}
	return err
}

// inputViewCount is the JSON shape of a posted view count. Numbers stay raw so that a wrong
// one is answered with its field and the accepted range.
type inputViewCount struct {
	Type     string          `json:"type"`
	ItemID   string          `json:"item_id"`
	Second   json.RawMessage `json:"second"`
	Count    json.RawMessage `json:"count"`
	SourceID string          `json:"source_id"`
	Seq      json.RawMessage `json:"seq"`
}

// ParseViewCountJSON decodes and validates one view count posted as JSON. With typeRequired the
// object must carry "type":"view_count". second (Unix seconds, or RFC 3339 text at a whole
// second), count and seq are required. Edge servers send few, large records, so this is
// encoding/json alone, without the views' hand-written fast path.
func ParseViewCountJSON(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (ViewCount, error) {
	var in inputViewCount
	if err := decodeStrict(b, &in); err != nil {
		return ViewCount{}, err
	}
	switch {
	case in.Type == "" && typeRequired:
		return ViewCount{}, &FieldError{"type", `is required ("view_count")`}
	case in.Type != "" && in.Type != "view_count":
		return ViewCount{}, &FieldError{"type", fmt.Sprintf("got %q; want \"view_count\"", in.Type)}
	}
	c := ViewCount{ItemID: in.ItemID, SourceID: in.SourceID}
	var err error
	if c.Second, err = parseSecondJSON(in.Second); err != nil {
		return ViewCount{}, err
	}
	if c.Count, err = parseUintJSON("count", in.Count, 1, MaxViewCount); err != nil {
		return ViewCount{}, err
	}
	if c.Seq, err = parseUintJSON("seq", in.Seq, 0, 1<<64-1); err != nil {
		return ViewCount{}, err
	}
	return c, c.Validate(now, bounds)
}

// parseUintJSON reads a required JSON integer in [lo, hi].
func parseUintJSON(field string, raw json.RawMessage, lo, hi uint64) (uint64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, &FieldError{field, "is required"}
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, &FieldError{field, fmt.Sprintf("is %s; want an integer from %d to %d", raw, lo, hi)}
	}
	return n, nil
}

// parseSecondJSON reads a required second: a JSON integer of Unix seconds or RFC 3339 text of a
// whole second.
func parseSecondJSON(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, &FieldError{"second", "is required"}
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				if t.Nanosecond() != 0 {
					return 0, &FieldError{"second", fmt.Sprintf("is %s; want a whole second", s)}
				}
				return t.Unix(), nil
			}
		}
	} else if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return n, nil
	}
	return 0, &FieldError{"second", fmt.Sprintf("is %s; want Unix seconds or RFC 3339 text", raw)}
}
