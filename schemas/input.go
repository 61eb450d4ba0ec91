package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file is the one decoder of the JSON objects producers post (views, clicks, fraud
// verdicts; input_events.go says what each kind's keys are and makes them events). A kind is an
// inputShape, a list of keys, from which the decoder derives both of its paths: a hand-written
// one for the plain objects nearly every producer sends (decodeFast), and encoding/json for
// everything else (decodeStd), which stays the definition of what is accepted and of every
// error message. The fast path is fuzzed against it (FuzzInputFastPath).

// valueKind says what JSON a key's value may be besides null, and how it is kept.
type valueKind uint8

const (
	textValue   valueKind = iota // a string, kept decoded
	timeValue                    // a timestamp: a string or an integer, kept as raw JSON (parseTSJSON)
	numberValue                  // a number, kept as raw JSON
)

// inputKey is one key of a kind of object.
type inputKey struct {
	name  string
	value valueKind
}

// maxInputKeys bounds a kind's keys (a click has nine), so that decoded values fit in an array
// on the stack and the keys seen in a bit set.
const maxInputKeys = 9

// inputValues holds a decoded object's values by the index of their key: a string's text, a
// timestamp's or number's raw JSON, and "" for a key that is absent or null.
type inputValues [maxInputKeys]string

// inputShape is one kind of posted object: its keys and the struct encoding/json decodes it
// into, one field per key, so that json's errors name the key and the expected type.
type inputShape struct {
	keys   []inputKey
	std    reflect.Type
	lookup [32]int8                // 1 + the index of the key in each slot (keySlot), 0 for none
	words  [maxInputKeys][2]uint64 // each key's bytes as two words, zero past its end (index)
	masks  [maxInputKeys][2]uint64 // the bits of words that a key's bytes fill
}

// newInputShape returns the shape of objects with keys, in the order of their indexes in
// inputValues.
func newInputShape(keys []inputKey) *inputShape {
	if len(keys) > maxInputKeys {
		panic(fmt.Sprintf("schemas: an input shape has %d keys; at most %d fit", len(keys), maxInputKeys))
	}
	sh := &inputShape{keys: keys}
	fields := make([]reflect.StructField, len(keys))
	for i, k := range keys {
		slot := keySlot(len(k.name), k.name[0])
		if sh.lookup[slot] != 0 || len(k.name) > 16 {
			panic(fmt.Sprintf("schemas: input key %q is longer than 16 bytes or shares a lookup slot; change keySlot", k.name))
		}
		sh.lookup[slot] = int8(i + 1)
		padded, ones := k.name+strings.Repeat("\x00", 16), strings.Repeat("\xff", len(k.name))+strings.Repeat("\x00", 16)
		sh.words[i] = [2]uint64{le64(padded), le64(padded[8:])}
		sh.masks[i] = [2]uint64{le64(ones), le64(ones[8:])}
		typ := reflect.TypeFor[json.RawMessage]()
		if k.value == textValue {
			typ = reflect.TypeFor[string]()
		}
		fields[i] = reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: typ, Tag: reflect.StructTag(`json:"` + k.name + `"`)}
	}
	sh.std = reflect.StructOf(fields)
	return sh
}

// decode decodes one object of the shape from b into in, strictly: unknown keys and data after
// the object are refused, every error is a *FieldError.
func (sh *inputShape) decode(b []byte, in *inputValues) error {
	if sh.decodeFast(b, in) {
		return nil
	}
	return sh.decodeStd(b, in)
}

// decodeStd is decode on encoding/json alone: the fallback, and the reference the fast path is
// fuzzed against.
func (sh *inputShape) decodeStd(b []byte, in *inputValues) error {
	*in = inputValues{}
	p := reflect.New(sh.std)
	if err := decodeStrict(b, p.Interface()); err != nil {
		return err
	}
	for i, k := range sh.keys {
		f := p.Elem().Field(i)
		if k.value == textValue {
			in[i] = f.String()
		} else if raw := string(f.Bytes()); raw != "null" {
			in[i] = raw
		}
	}
	return nil
}

// decodeFast decodes b into in if it is one flat object of the shape's keys (exact spelling,
// each at most once) whose values are plain strings (see plainString), null, or for timestamps
// an integer and for numbers a plain JSON number, with only whitespace around. For such input
// it yields exactly what decodeStd would; for any other it reports false, so that everything
// unusual, and every error, stays encoding/json's.
func (sh *inputShape) decodeFast(b []byte, in *inputValues) bool {
	*in = inputValues{}
	// One copy that all the values share, rather than one allocation per key.
	s := string(b)
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return false
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return skipSpace(s, i+1) == len(s)
	}
	var seen uint16
	for {
		_, j, ok := plainString(s, i)
		if !ok {
			return false
		}
		k := sh.index(s, i+1, j-1)
		i = skipSpace(s, j)
		if i == len(s) || s[i] != ':' {
			return false
		}
		// Unknown keys include known ones spelt in another case, which encoding/json matches;
		// repeated keys it merges (the last wins, but a later null keeps the earlier).
		if k < 0 || seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		i = skipSpace(s, i+1)
		switch v := sh.keys[k].value; {
		case strings.HasPrefix(s[i:], "null"):
			// encoding/json leaves a string as it was, and a raw value "null" means absent.
			j = i + len("null")
		case v == textValue:
			if in[k], j, ok = plainString(s, i); !ok {
				return false
			}
		default:
			if j, ok = v.rawEnd(s, i); !ok {
				return false
			}
			in[k] = s[i:j]
		}
		i = skipSpace(s, j)
		if i == len(s) {
			return false
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return skipSpace(s, i+1) == len(s)
		default:
			return false
		}
	}
}

// index returns the index of the key s[a:b], or -1 for a key the shape does not have: the key
// in its lookup slot (keySlot), if it is that one. With 16 bytes of input from the key on (the
// key's closing quote and the rest of the object nearly always give them) the two are compared
// as two masked words, without the call a string comparison costs.
func (sh *inputShape) index(s string, a, b int) int {
	// s[a] is the key's first byte, or its closing quote for an empty key.
	k := int(sh.lookup[keySlot(b-a, s[a])]) - 1
	if k < 0 || len(sh.keys[k].name) != b-a {
		return -1
	}
	if len(s)-a < 16 {
		if sh.keys[k].name != s[a:b] {
			return -1
		}
		return k
	}
	w, m := &sh.words[k], &sh.masks[k]
	if le64(s[a:])&m[0] != w[0] || le64(s[a+8:])&m[1] != w[1] {
		return -1
	}
	return k
}

// keySlot is the slot in an inputShape's lookup table of a key of n bytes starting with first.
// Each shape's keys have distinct slots (newInputShape checks), so that a key is compared with
// one key only: scanning the keys made the fast path a fifth slower for clicks' nine.
func keySlot(n int, first byte) uint {
	return uint(n+int(first)) % uint(len(inputShape{}.lookup))
}

// le64 returns the first 8 bytes of s as a little-endian word, in one load.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// rawEnd returns the index after a timestamp or number at s[i] as decodeFast takes it; false
// for any value it leaves to encoding/json.
func (v valueKind) rawEnd(s string, i int) (int, bool) {
	if v == numberValue {
		return jsonNumber(s, i)
	}
	if j, ok := jsonInt(s, i); ok {
		return j, true
	}
	_, j, ok := plainString(s, i)
	return j, ok
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

// jsonNumber returns the index after a JSON number at s[i] (integer part, optional fraction,
// optional exponent, as the JSON grammar has them).
func jsonNumber(s string, i int) (int, bool) {
	j, ok := jsonInt(s, i)
	if !ok {
		return i, false
	}
	if j < len(s) && s[j] == '.' {
		if j = digits(s, j+1); j < 0 {
			return i, false
		}
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		j++
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j = digits(s, j); j < 0 {
			return i, false
		}
	}
	return j, true
}

// digits returns the index after the run of at least one digit at s[i], or -1 when there is none.
func digits(s string, i int) int {
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// parseTSJSON reads a timestamp kept as raw JSON: a string (RFC 3339 or Unix milliseconds) or
// an integer of Unix milliseconds.
func parseTSJSON(raw string) (int64, error) {
	if raw[0] == '"' {
		// A plain string (no escapes, ASCII only) decodes to its contents; json.Unmarshal
		// would cost more than the rest of a fast-path parse.
		if s, j, ok := plainString(raw, 0); ok && j == len(raw) {
			return ParseTS(s)
		}
		var s string
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return 0, errBadTS
		}
		return ParseTS(s)
	}
	ms, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, errBadTS
	}
	return ms, nil
}

// decodeStrict decodes one JSON object from b into dst, rejecting unknown fields and trailing
// data, with errors as FieldErrors.
func decodeStrict(b []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	// Decoder.More would miss a stray closing bracket after the object.
	if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
		return &FieldError{"body", "has data after the JSON object"}
	}
	return nil
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
