package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// inputEvent is the JSON shape producers post; fields of every event type live here so one
// strict decode can reject unknown (misspelt) fields.
type inputEvent struct {
	Type     string          `json:"type"`
	ItemID   string          `json:"item_id"`
	ViewerID string          `json:"viewer_id"`
	EventID  string          `json:"event_id"`
	TS       json.RawMessage `json:"ts"`
}

// ParseViewJSON decodes and validates one view posted as JSON. With typeRequired, the object
// must carry "type":"view" (NDJSON batches mix types); without it, a type is optional. An absent
// ts is now.
func ParseViewJSON(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (View, error) {
	var in inputEvent
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return View{}, jsonError(err)
	}
	if dec.More() {
		return View{}, &FieldError{"body", "has data after the JSON object"}
	}
	switch {
	case in.Type == "" && typeRequired:
		return View{}, &FieldError{"type", `is required ("view")`}
	case in.Type != "" && in.Type != "view":
		return View{}, &FieldError{"type", fmt.Sprintf("got %q; want \"view\"", in.Type)}
	}
	v := View{ItemID: in.ItemID, ViewerID: in.ViewerID, EventID: in.EventID, TS: now.UnixMilli()}
	if len(in.TS) > 0 && string(in.TS) != "null" {
		ts, err := parseTSJSON(in.TS)
		if err != nil {
			return View{}, &FieldError{"ts", err.Error()}
		}
		v.TS = ts
	}
	return v, v.Validate(now, bounds)
}

func parseTSJSON(raw json.RawMessage) (int64, error) {
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, errBadTS
		}
		return ParseTS(s)
	}
	ms, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, errBadTS
	}
	return ms, nil
}

// jsonError turns a decoding error into a FieldError naming the field when json knows it.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return &FieldError{typeErr.Field, fmt.Sprintf("has a JSON %s; want %s", typeErr.Value, typeErr.Type)}
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return &FieldError{"body", fmt.Sprintf("is not valid JSON at byte %d: %v", syn.Offset, err)}
	}
	if msg := err.Error(); len(msg) > len("json: unknown field ") && msg[:len("json: unknown field ")] == "json: unknown field " {
		return &FieldError{msg[len("json: unknown field "):], "is not a known field"}
	}
	if errors.Is(err, io.EOF) {
		return &FieldError{"body", "is empty; want a JSON object"}
	}
	return &FieldError{"body", "is not a JSON object: " + err.Error()}
}
