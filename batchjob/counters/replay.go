package counters

import (
	"slices"
	"strings"
	"time"

	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/dedupe"
)

// Row is one counter's line of a report.
type Row struct {
	Name       string
	Adds       int64  // the sum of the day's counted adds (stamped on the day, counted once per token)
	Clears     uint32 // the day's counted clears
	Duplicates uint64 // the day's adds and clears dropped as repeats of a token
	// Count is the counter at the end of the day by the recount: Before, or zero after the
	// day's last clear in log order, plus the day's adds counted after it.
	Count int64
	// Before and Stored are the stream's stored totals (counter_deltas) before the day and at
	// its end.
	Before, Stored int64
}

// Differs says whether the recount and the stream disagree on the counter's end of day.
func (r Row) Differs() bool { return r.Count != r.Stored }

// windowKey is one dedupe window of a partition: the aggregators keep one per partition and
// window length.
type windowKey struct {
	partition int32
	window    int64
}

// counterKey is a counter of one of the replayed namespaces.
type counterKey struct{ ns, name string }

// tally is one counter's day as the replay goes.
type tally struct {
	Row
	cleared bool  // a clear of the day was counted
	since   int64 // the adds counted since the day's last clear (or the day's start)
}

// Replay recounts some namespaces' day from the log, fed in log order per partition. Every add
// and clear of every namespace goes through the dedupe windows, as in the aggregators, whose
// windows' watermarks move with all the partition's records; only the replayed namespaces'
// records (of their current generation) stamped on the day are tallied. Distinct members are not
// counted here (their sketches have no exact recount). Not safe for concurrent use.
type Replay struct {
	gens     map[string]uint64 // the replayed namespaces' generations
	from, to int64             // the day, Unix ms
	windows  map[windowKey]*dedupe.Window
	counters map[counterKey]*tally
	stats    logread.Stats
}

// NewReplay returns an empty replay of the namespaces gens names (with their generations) on
// the UTC day.
func NewReplay(gens map[string]uint64, day time.Time) *Replay {
	return &Replay{gens: gens, from: day.UnixMilli(), to: day.AddDate(0, 0, 1).UnixMilli(),
		windows: map[windowKey]*dedupe.Window{}, counters: map[counterKey]*tally{}}
}

// Apply takes the next record of partition p.
func (r *Replay) Apply(p int32, value []byte) {
	r.stats.Records++
	e, err := schemas.DecodeCounterEvent(value)
	if err != nil {
		r.stats.Undecodable++
		return
	}
	if e.Op == schemas.CounterDistinct {
		return
	}
	wk := windowKey{p, e.Window}
	w := r.windows[wk]
	if w == nil {
		w = dedupe.New(e.Window, schemas.CounterGrace)
		r.windows[wk] = w
	}
	counted := w.Observe(e.DedupeKey(), e.TS)
	if gen, ok := r.gens[e.Namespace]; !ok || e.Generation != gen || e.TS < r.from || e.TS >= r.to {
		return
	}
	k := counterKey{e.Namespace, e.Name}
	t := r.counters[k]
	if t == nil {
		t = &tally{Row: Row{Name: e.Name}}
		r.counters[k] = t
	}
	switch {
	case !counted:
		t.Duplicates++
	case e.Op == schemas.CounterClear:
		t.Clears++
		t.cleared, t.since = true, 0
	default:
		t.Adds += e.Delta
		t.since += e.Delta
	}
}

// Stats is what the replay read so far.
func (r *Replay) Stats() logread.Stats { return r.stats }

// Names are the counters of namespace ns the replay tallied.
func (r *Replay) Names(ns string) []string {
	var out []string
	for k := range r.counters {
		if k.ns == ns {
			out = append(out, k.name)
		}
	}
	return out
}

// Rows joins the replay of namespace ns with the stream's stored totals (by counter: before the
// day and at its end) into the report's rows, sorted by name: one per counter the replay tallied
// or the stream changed on the day.
func (r *Replay) Rows(ns string, stored map[string]Stored) []Row {
	var out []Row
	for k, t := range r.counters {
		if k.ns != ns {
			continue
		}
		row := t.Row
		s := stored[k.name]
		row.Before, row.Stored = s.Before, s.End
		row.Count = t.since
		if !t.cleared {
			row.Count += s.Before
		}
		out = append(out, row)
	}
	for name, s := range stored {
		if _, ok := r.counters[counterKey{ns, name}]; !ok && s.ChangedOnDay {
			out = append(out, Row{Name: name, Count: s.Before, Before: s.Before, Stored: s.End})
		}
	}
	slices.SortFunc(out, func(a, b Row) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Stored is a counter's stored totals in counter_deltas: before the day and at its end, and
// whether it has rows in the day's minutes.
type Stored struct {
	Before, End  int64
	ChangedOnDay bool
}
