package schemas

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/tallypipeline/tally/schemas/dedupe"
)

// CounterEvent is one add to a generic counter of a namespace in mode eventual, as the collector
// writes it to TopicCounterEvents: JSON, so any consumer reads it. It carries what the
// namespace said when it was accepted (generation, idempotency window, retention), so a replay
// decides as the first run did whatever the namespace's settings became since.
type CounterEvent struct {
	// Op is CounterAdd (also when empty), CounterClear (the counter set to zero at its place in
	// the log; Delta ignored) or CounterDistinct (Member added to the counter's distinct members
	// of its hour; Delta and Token ignored: adding a member twice is adding it once).
	Op         string `json:"op,omitempty"`
	Namespace  string `json:"ns"`
	Generation uint64 `json:"gen"`
	Name       string `json:"name"`
	Delta      int64  `json:"delta"`
	// Token counts the add once among the adds of the counter within Window of it (dedupe).
	Token     string `json:"token"`
	TS        int64  `json:"ts"`        // event time, Unix milliseconds
	Window    int64  `json:"window_ms"` // the namespace's idempotency window
	Retention int64  `json:"retention_s"`
	Member    string `json:"member,omitempty"`
}

// The ops of a CounterEvent.
const (
	CounterAdd      = "add"
	CounterClear    = "clear"
	CounterDistinct = "distinct"
)

// MaxCounterWindow and MaxCounterRetention bound what a record may carry (the namespaces' own
// bounds, platform/counters).
const (
	MaxCounterWindow    = 7 * 24 * 3600 * 1000
	MaxCounterRetention = 10 * 366 * 24 * 3600
)

// CounterKey is the record key of counter name of namespace ns.
func CounterKey(ns, name string) []byte { return []byte(ns + "/" + name) }

// CounterGrace is how far behind a window's newest add a late add is still deduplicated against
// the window's whole state (package dedupe): the aggregators' rule, which accurate reads repeat.
const CounterGrace = 10 * 60 * 1000

// DedupeKey is the identity under which an add's or a clear's token is deduplicated: the token
// within its counter (and the namespace's generation). The aggregators persist it, and accurate
// reads look it up, so it must never change.
func (e CounterEvent) DedupeKey() uint64 {
	return dedupe.Key(e.Token, e.Namespace+"@"+strconv.FormatUint(e.Generation, 36)+"/"+e.Name)
}

// AppendCounterEvent appends e's encoding to b.
func AppendCounterEvent(b []byte, e CounterEvent) []byte {
	out, _ := json.Marshal(e) // a struct of strings and integers always encodes
	return append(b, out...)
}

// DecodeCounterEvent decodes and validates one record value.
func DecodeCounterEvent(b []byte) (CounterEvent, error) {
	var e CounterEvent
	if err := json.Unmarshal(b, &e); err != nil {
		return CounterEvent{}, fmt.Errorf("counter event: %w", err)
	}
	switch {
	case e.Op != "" && e.Op != CounterAdd && e.Op != CounterClear && e.Op != CounterDistinct:
		return CounterEvent{}, &FieldError{"op", fmt.Sprintf("got %q; want add, clear or distinct", e.Op)}
	case e.Namespace == "" || len(e.Namespace) > 63:
		return CounterEvent{}, &FieldError{"ns", "must be 1..63 bytes"}
	case e.Window <= 0 || e.Window > MaxCounterWindow:
		return CounterEvent{}, &FieldError{"window_ms", fmt.Sprintf("got %d; want 1..%d", e.Window, MaxCounterWindow)}
	case e.Retention <= 0 || e.Retention > MaxCounterRetention:
		return CounterEvent{}, &FieldError{"retention_s", fmt.Sprintf("got %d; want 1..%d", e.Retention, MaxCounterRetention)}
	case e.TS <= 0:
		return CounterEvent{}, &FieldError{"ts", "must be a positive Unix time in milliseconds"}
	}
	if err := CheckID("name", e.Name, true); err != nil {
		return CounterEvent{}, err
	}
	if e.Op == CounterDistinct {
		if err := CheckID("member", e.Member, true); err != nil {
			return CounterEvent{}, err
		}
		return e, nil
	}
	if err := CheckID("token", e.Token, true); err != nil {
		return CounterEvent{}, err
	}
	return e, nil
}
