package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
//
// It runs once per NDJSON line, so the plain shape nearly every producer sends is decoded by
// hand (decodeInputFast); anything else goes through encoding/json (parseViewJSONStd), which
// stays the definition of what is accepted and of every error message.
func ParseViewJSON(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (View, error) {
	in, ok := decodeInputFast(b)
	if !ok {
		return parseViewJSONStd(b, typeRequired, now, bounds)
	}
	return in.view(typeRequired, now, bounds)
}

// parseViewJSONStd is ParseViewJSON on encoding/json alone: the fallback, and the reference the
// fast path is fuzzed against.
func parseViewJSONStd(b []byte, typeRequired bool, now time.Time, bounds TimeBounds) (View, error) {
	var in inputEvent
	if err := decodeStrict(b, &in); err != nil {
		return View{}, err
	}
	return in.view(typeRequired, now, bounds)
}

// view checks a decoded event and turns it into a View.
func (in *inputEvent) view(typeRequired bool, now time.Time, bounds TimeBounds) (View, error) {
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

// decodeInputFast decodes b if it is one flat object of known keys (exact spelling, each at most
// once) whose values are plain strings (see plainString) or null, ts also an integer, with only
// whitespace around. For such input it yields exactly what encoding/json would; for any other it
// reports false, so that everything unusual, and every error, stays encoding/json's.
func decodeInputFast(b []byte) (in inputEvent, ok bool) {
	// One copy that all the View's strings share, rather than one allocation per field.
	s := string(b)
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return in, false
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return in, skipSpace(s, i+1) == len(s)
	}
	var seen uint8
	for {
		key, j, ok := plainString(s, i)
		if !ok {
			return in, false
		}
		i = skipSpace(s, j)
		if i == len(s) || s[i] != ':' {
			return in, false
		}
		i = skipSpace(s, i+1)
		var bit uint8
		var dst *string
		switch key {
		case "type":
			bit, dst = 1, &in.Type
		case "item_id":
			bit, dst = 2, &in.ItemID
		case "viewer_id":
			bit, dst = 4, &in.ViewerID
		case "event_id":
			bit, dst = 8, &in.EventID
		case "ts":
			bit = 16
		default:
			// Includes known keys spelt in another case, which encoding/json matches.
			return in, false
		}
		// encoding/json merges repeated keys (the last wins, but a later null keeps the earlier).
		if seen&bit != 0 {
			return in, false
		}
		seen |= bit
		switch {
		case strings.HasPrefix(s[i:], "null"):
			// encoding/json leaves a string as it was and stores ts as the raw "null".
			j = i + len("null")
			if dst == nil {
				in.TS = b[i:j]
			}
		case dst != nil:
			if *dst, j, ok = plainString(s, i); !ok {
				return in, false
			}
		default:
			// ts keeps its raw bytes, as json.RawMessage does; view parses them.
			if _, j, ok = plainString(s, i); !ok {
				if j, ok = jsonInt(s, i); !ok {
					return in, false
				}
			}
			in.TS = b[i:j]
		}
		i = skipSpace(s, j)
		if i == len(s) {
			return in, false
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return in, skipSpace(s, i+1) == len(s)
		default:
			return in, false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at s[i] that decodes to its own bytes: no escapes, and only
// ASCII, since encoding/json rewrites invalid UTF-8 and control bytes are not valid JSON. It
// returns the contents and the index after the closing quote.
func plainString(s string, i int) (string, int, bool) {
	if i == len(s) || s[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c < ' ' || c == '\\' || c >= utf8.RuneSelf:
			return "", i, false
		}
	}
	return "", i, false
}

// jsonInt returns the index after a JSON number at s[i] that has neither fraction nor exponent.
// Its range is not checked: parseTSJSON answers an out-of-range one as it would from
// encoding/json.
func jsonInt(s string, i int) (int, bool) {
	j := i
	if j < len(s) && s[j] == '-' {
		j++
	}
	digits := j
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == digits || s[digits] == '0' && j-digits > 1 {
		return i, false
	}
	return j, true
}

func parseTSJSON(raw json.RawMessage) (int64, error) {
	if raw[0] == '"' {
		// A plain string (no escapes, ASCII only) decodes to its contents; json.Unmarshal
		// would cost more than the rest of a fast-path parse.
		if s, j, ok := plainString(string(raw), 0); ok && j == len(raw) {
			return ParseTS(s)
		}
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
