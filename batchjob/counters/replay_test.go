package counters

import (
	"slices"
	"testing"
	"time"

	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/schemas"
)

var day = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// ev is a record of the log: op on counter name of namespace ns (generation 1 unless gen),
// stamped at offset from the day's start, with a one-hour window.
type ev struct {
	p     int32
	op    string
	ns    string
	gen   uint64
	name  string
	delta int64
	token string
	at    time.Duration
}

func (e ev) value() []byte {
	gen := e.gen
	if gen == 0 {
		gen = 1
	}
	return schemas.AppendCounterEvent(nil, schemas.CounterEvent{Op: e.op, Namespace: e.ns, Generation: gen, Name: e.name, Delta: e.delta,
		Token: e.token, TS: day.Add(e.at).UnixMilli(), Window: time.Hour.Milliseconds(), Retention: 86400})
}

func add(name string, delta int64, token string, at time.Duration) ev {
	return ev{op: schemas.CounterAdd, ns: "shares", name: name, delta: delta, token: token, at: at}
}

func TestReplay(t *testing.T) {
	clear := func(name, token string, at time.Duration) ev {
		return ev{op: schemas.CounterClear, ns: "shares", name: name, token: token, at: at}
	}
	tests := []struct {
		name   string
		log    []ev
		stored map[string]Stored
		want   []Row
	}{
		{"adds on the stored total before the day", []ev{add("a", 5, "t1", time.Hour), add("a", -2, "t2", 2*time.Hour)},
			map[string]Stored{"a": {Before: 10, End: 13, ChangedOnDay: true}},
			[]Row{{Name: "a", Adds: 3, Count: 13, Before: 10, Stored: 13}}},
		{"a retry within the window counts once", []ev{add("a", 5, "t1", time.Hour), add("a", 5, "t1", time.Hour+time.Minute)},
			nil, []Row{{Name: "a", Adds: 5, Duplicates: 1, Count: 5}}},
		{"a retry past the window counts again", []ev{add("a", 5, "t1", time.Hour), add("a", 5, "t1", 2*time.Hour+time.Minute)},
			nil, []Row{{Name: "a", Adds: 10, Count: 10}}},
		{"a repeat of the day before's add is dropped", []ev{add("a", 5, "t1", -10*time.Minute), add("a", 5, "t1", 10*time.Minute)},
			map[string]Stored{"a": {Before: 5, End: 5}},
			[]Row{{Name: "a", Duplicates: 1, Count: 5, Before: 5, Stored: 5}}},
		{"another namespace's later add on the partition moves the watermark: an older add is forgotten at once", []ev{
			{op: schemas.CounterAdd, ns: "plays", name: "x", delta: 1, token: "tx", at: time.Hour},
			add("a", 5, "t1", -20*time.Minute), add("a", 5, "t1", 10*time.Minute)},
			nil, []Row{{Name: "a", Adds: 5, Count: 5}}},
		{"the next day's adds are not the day's", []ev{add("a", 5, "t1", 23*time.Hour), add("a", 7, "t2", 25*time.Hour)},
			nil, []Row{{Name: "a", Adds: 5, Count: 5}}},
		{"a clear drops what came before it in the log", []ev{add("a", 5, "t1", time.Hour), clear("a", "c1", 2*time.Hour), add("a", 3, "t3", 3*time.Hour)},
			map[string]Stored{"a": {Before: 100, End: 3, ChangedOnDay: true}},
			[]Row{{Name: "a", Adds: 8, Clears: 1, Count: 3, Before: 100, Stored: 3}}},
		{"a retried clear counts once", []ev{clear("a", "c1", time.Hour), add("a", 3, "t3", time.Hour+10*time.Minute), clear("a", "c1", time.Hour+20*time.Minute)},
			nil, []Row{{Name: "a", Adds: 3, Clears: 1, Duplicates: 1, Count: 3}}},
		{"other namespaces and generations are not the namespace's", []ev{add("a", 5, "t1", time.Hour),
			{op: schemas.CounterAdd, ns: "plays", name: "a", delta: 9, token: "t9", at: time.Hour},
			{op: schemas.CounterAdd, ns: "likes", name: "a", delta: 9, token: "t9", at: time.Hour},
			{op: schemas.CounterAdd, ns: "shares", gen: 2, name: "a", delta: 9, token: "t9", at: time.Hour}},
			nil, []Row{{Name: "a", Adds: 5, Count: 5}}},
		{"a stored change the log lacks is a row that differs", []ev{add("a", 5, "t1", time.Hour)},
			map[string]Stored{"a": {End: 5, ChangedOnDay: true}, "b": {Before: 2, End: 9, ChangedOnDay: true}, "c": {Before: 4, End: 4}},
			[]Row{{Name: "a", Adds: 5, Count: 5, Stored: 5}, {Name: "b", Count: 2, Before: 2, Stored: 9}}},
		{"distinct members and undecodable records count nothing", []ev{add("a", 5, "t1", time.Hour),
			{op: schemas.CounterDistinct, ns: "shares", name: "a", at: time.Hour}, {ns: ""}},
			nil, []Row{{Name: "a", Adds: 5, Count: 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReplay(map[string]uint64{"shares": 1, "likes": 1}, day)
			for _, e := range tt.log {
				r.Apply(e.p, e.value())
			}
			if got := r.Rows("shares", tt.stored); !slices.Equal(got, tt.want) {
				t.Fatalf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

// The dedupe windows are the aggregators': one per partition. A key met on two partitions
// (never one counter's: its records share a partition) is decided by each apart.
func TestReplayWindowsPerPartition(t *testing.T) {
	r := NewReplay(map[string]uint64{"shares": 1}, day)
	a, b := add("a", 1, "t1", time.Hour), add("a", 1, "t1", time.Hour)
	b.p = 1
	r.Apply(a.p, a.value())
	r.Apply(b.p, b.value())
	if got := r.Rows("shares", nil); len(got) != 1 || got[0].Count != 2 {
		t.Fatalf("got %+v; want one counter at 2", got)
	}
	if got, want := r.Stats(), (logread.Stats{Records: 2}); got != want {
		t.Fatalf("got %+v; want %+v", got, want)
	}
}
