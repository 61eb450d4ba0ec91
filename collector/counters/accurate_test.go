package counters

import (
	"fmt"
	"testing"

	"github.com/tallypipeline/tally/schemas"
)

// The tail of an accurate read is folded as the aggregators count the log: a token counts once
// within its window (earlier in the tail, or before the checkpoint), a clear takes back the
// total before it in its own minute.
func TestTailFold(t *testing.T) {
	const hour = 3_600_000
	ev := func(op, token string, delta, ts int64) schemas.CounterEvent {
		return schemas.CounterEvent{Op: op, Namespace: "n", Generation: 1, Name: "c", Delta: delta, Token: token, TS: ts, Window: hour, Retention: 86400}
	}
	before := func(e schemas.CounterEvent, ts int64) map[uint64][]int64 {
		return map[uint64][]int64{e.DedupeKey(): {ts}}
	}
	for _, c := range []struct {
		name    string
		durable int64
		evs     []schemas.CounterEvent
		before  map[uint64][]int64
		total   int64
		minutes map[int64]int64
	}{
		{"adds", 10, []schemas.CounterEvent{ev("add", "a", 2, 60_000), ev("", "b", -1, 120_000)}, nil, 11, map[int64]int64{60: 2, 120: -1}},
		{"a retry in the tail", 0, []schemas.CounterEvent{ev("add", "a", 2, 0), ev("add", "a", 2, 1000)}, nil, 2, map[int64]int64{0: 2}},
		{"a retry a window later", 0, []schemas.CounterEvent{ev("add", "a", 2, 0), ev("add", "a", 2, hour)}, nil, 4, map[int64]int64{0: 2, 3600: 2}},
		{"a token counted before the checkpoint", 5, []schemas.CounterEvent{ev("add", "a", 2, 0)}, before(ev("add", "a", 2, 0), 30_000), 5, map[int64]int64{}},
		{"a token counted a window before", 5, []schemas.CounterEvent{ev("add", "a", 2, hour)}, before(ev("add", "a", 2, 0), 0), 7, map[int64]int64{3600: 2}},
		{"a clear", 10, []schemas.CounterEvent{ev("add", "a", 2, 0), ev("clear", "c", 0, 60_000), ev("add", "b", 3, 60_000)}, nil, 3, map[int64]int64{0: 2, 60: -9}},
		{"a clear retried", 10, []schemas.CounterEvent{ev("clear", "c", 0, 0), ev("add", "b", 3, 0), ev("clear", "c", 0, 0)}, nil, 3, map[int64]int64{0: -7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			total, minutes := fold(c.durable, counted(c.evs, c.before))
			if total != c.total || fmt.Sprint(minutes) != fmt.Sprint(c.minutes) {
				t.Errorf("got %d, minutes %v; want %d, %v", total, minutes, c.total, c.minutes)
			}
		})
	}
}
