// Package counters is the generic counter service's state (docs/API.md, "Generic counters"): the
// namespaces, kept in ClickHouse and held in memory by every collector (Registry), and the
// counters of the best_effort mode, which live in Redis alone (BestEffort); the eventual mode's
// go through the counter_events topic (the collector writes, the aggregators count). A counter is named
// by its namespace and its name; the namespace says its consistency mode, how long its data is
// kept, how long an idempotency token is remembered, and which API keys may write and read it.
//
// Concurrency: a Registry is safe for concurrent use; Run refreshes it until its context ends
// and is the only goroutine it has. BestEffort holds no state of its own.
package counters

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tallypipeline/tally/schemas"
)

// Mode is a namespace's consistency mode.
type Mode string

const (
	// ModeBestEffort counters live in Redis alone: the fastest, and a Redis that loses its data loses
	// them (docs/API.md says how much).
	ModeBestEffort Mode = "best_effort"
	// ModeEventual counters go through the Kafka log and the counting engine into ClickHouse,
	// exactly once; reads lag by about the flush interval.
	ModeEventual Mode = "eventual"
	// ModeAccurate counters are written as eventual ones are; a read adds to the counted total the
	// log's events after the last checkpoint, so a caller reads its acknowledged adds at once.
	ModeAccurate Mode = "accurate"
)

// Logged reports whether m's adds go through the Kafka log (eventual and accurate): they need
// idempotency tokens, and they keep time buckets.
func (m Mode) Logged() bool { return m == ModeEventual || m == ModeAccurate }

// Limits of a namespace's settings.
const (
	DefaultRetention   = 90 * 24 * time.Hour
	MinRetention       = time.Hour
	MaxRetention       = 10 * 365 * 24 * time.Hour
	DefaultIdempotency = 24 * time.Hour
	MinIdempotency     = time.Minute
	MaxIdempotency     = 7 * 24 * time.Hour
	// MaxKeys bounds the writers and readers lists.
	MaxKeys = 100
)

// Namespace is one namespace's settings.
type Namespace struct {
	Name string
	Mode Mode
	// Retention is how long a counter's data is kept after its last write (best_effort: the
	// counter's Redis key expires then).
	Retention time.Duration
	// IdempotencyWindow is how long a token is remembered: an add retried with its token within
	// it counts once.
	IdempotencyWindow time.Duration
	// Writers and Readers are the API key ids that may add to and read the namespace's
	// counters; empty means every key with the route's scope.
	Writers, Readers []string
	// Generation is the version the namespace was created at: a namespace deleted and created
	// again under its name starts from zero, whatever its old keys still hold.
	Generation uint64
	Version    uint64 // of the last change
	ChangedAt  time.Time
}

var nsName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// CheckName validates a namespace name: 1..63 lower-case letters, digits and _ . -, starting
// with a letter or digit.
func CheckName(name string) error {
	if !nsName.MatchString(name) {
		return &schemas.FieldError{Field: "ns", Reason: fmt.Sprintf("got %q; want 1..63 of a-z 0-9 _ . - starting with a letter or digit", name)}
	}
	return nil
}

// CheckCounter validates a counter name (the ids' rule: 1..128 of letters, digits, _ . : @ -).
func CheckCounter(name string) error { return schemas.CheckID("name", name, true) }

// Spec is the body of PUT /v1/namespaces/{ns}.
type Spec struct {
	Mode              Mode     `json:"mode"`
	Retention         string   `json:"retention,omitempty"`
	IdempotencyWindow string   `json:"idempotency_window,omitempty"`
	Writers           []string `json:"writers,omitempty"`
	Readers           []string `json:"readers,omitempty"`
}

// ParseSpec decodes and validates a namespace body for namespace name, defaults filled in.
func ParseSpec(name string, body []byte) (Namespace, error) {
	if err := CheckName(name); err != nil {
		return Namespace{}, err
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Namespace{}, &schemas.FieldError{Field: "body", Reason: "not a namespace: " + err.Error()}
	}
	if dec.More() {
		return Namespace{}, &schemas.FieldError{Field: "body", Reason: "holds more than one JSON value"}
	}
	ns := Namespace{Name: name, Mode: s.Mode, Writers: s.Writers, Readers: s.Readers}
	switch s.Mode {
	case ModeBestEffort, ModeEventual, ModeAccurate:
	default:
		return Namespace{}, &schemas.FieldError{Field: "mode", Reason: fmt.Sprintf("got %q; want best_effort, eventual or accurate", s.Mode)}
	}
	var err error
	if ns.Retention, err = durationField("retention", s.Retention, DefaultRetention, MinRetention, MaxRetention); err != nil {
		return Namespace{}, err
	}
	if ns.IdempotencyWindow, err = durationField("idempotency_window", s.IdempotencyWindow, DefaultIdempotency, MinIdempotency, MaxIdempotency); err != nil {
		return Namespace{}, err
	}
	for _, l := range []struct {
		field string
		ids   []string
	}{{"writers", s.Writers}, {"readers", s.Readers}} {
		if len(l.ids) > MaxKeys {
			return Namespace{}, &schemas.FieldError{Field: l.field, Reason: fmt.Sprintf("got %d key ids; want at most %d", len(l.ids), MaxKeys)}
		}
		for _, id := range l.ids {
			if err := schemas.CheckID(l.field, id, true); err != nil {
				return Namespace{}, err
			}
		}
	}
	return ns, nil
}

// durationField parses a duration given as Go's (90m, 24h) or in whole days (90d); empty means
// def.
func durationField(field, s string, def, lo, hi time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := ParseDuration(s)
	if err != nil || d < lo || d > hi {
		return 0, &schemas.FieldError{Field: field, Reason: fmt.Sprintf("got %q; want a duration from %s to %s (e.g. 24h, 90d)", s, FormatDuration(lo), FormatDuration(hi))}
	}
	return d, nil
}

// ParseDuration reads Go's durations and whole days (90d).
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("duration %q: days must be a whole number", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// FormatDuration writes whole days as 90d and other durations as Go does.
func FormatDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// View is a namespace as the API shows it.
type View struct {
	Name              string    `json:"name"`
	Mode              Mode      `json:"mode"`
	Retention         string    `json:"retention"`
	IdempotencyWindow string    `json:"idempotency_window"`
	Writers           []string  `json:"writers"`
	Readers           []string  `json:"readers"`
	ChangedAt         time.Time `json:"changed_at"`
}

// View is ns as the API shows it.
func (ns Namespace) View() View {
	return View{Name: ns.Name, Mode: ns.Mode, Retention: FormatDuration(ns.Retention), IdempotencyWindow: FormatDuration(ns.IdempotencyWindow),
		Writers: nonNil(ns.Writers), Readers: nonNil(ns.Readers), ChangedAt: ns.ChangedAt.UTC()}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// MayWrite and MayRead report whether the API key keyID may add to and read the namespace.
func (ns Namespace) MayWrite(keyID string) bool { return allowed(ns.Writers, keyID) }
func (ns Namespace) MayRead(keyID string) bool  { return allowed(ns.Readers, keyID) }

func allowed(ids []string, keyID string) bool {
	if len(ids) == 0 {
		return true
	}
	for _, id := range ids {
		if id == keyID {
			return true
		}
	}
	return false
}
