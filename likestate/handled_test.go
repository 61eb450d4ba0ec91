package likestate

import (
	"fmt"
	"testing"
)

func TestHandledSkipsWhatRequestsApplied(t *testing.T) {
	rec := func(p int32, off int64) Record { return Record{Partition: p, Offset: off} }
	tests := []struct {
		name      string
		added     []Record // applied by requests, in this order
		batch     []Record // then read by the applier
		want      []Record // left for the applier to apply
		remaining int      // offsets still remembered afterwards
	}{
		{"nothing applied by requests", nil, []Record{rec(0, 1), rec(0, 2)}, []Record{rec(0, 1), rec(0, 2)}, 0},
		{"all applied", []Record{rec(0, 1), rec(0, 2)}, []Record{rec(0, 1), rec(0, 2)}, nil, 0},
		{"some applied", []Record{rec(0, 2)}, []Record{rec(0, 1), rec(0, 2), rec(0, 3)}, []Record{rec(0, 1), rec(0, 3)}, 0},
		{"same offset, other partition", []Record{rec(1, 1)}, []Record{rec(0, 1)}, []Record{rec(0, 1)}, 1},
		{"offsets past the batch kept", []Record{rec(0, 1), rec(0, 5)}, []Record{rec(0, 1)}, nil, 1},
		{"applied after the applier passed it: forgotten", []Record{rec(0, 1)}, []Record{rec(0, 3)}, []Record{rec(0, 3)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHandled()
			for _, r := range tt.added {
				h.add(r.Partition, r.Offset)
			}
			got := h.unapplied(append([]Record(nil), tt.batch...))
			if fmt.Sprint(got) != fmt.Sprint(tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
			n := 0
			for _, m := range h.parts {
				n += len(m)
			}
			if n != tt.remaining {
				t.Errorf("got %d offsets remembered; want %d", n, tt.remaining)
			}
		})
	}
}

// A partition whose applier is another process is never read here: its offsets are dropped
// once the bound is reached, never growing without limit.
func TestHandledIsBounded(t *testing.T) {
	h := newHandled()
	for off := range int64(3 * maxHandledPerPartition) {
		h.add(7, off)
	}
	if got := len(h.parts[7]); got > maxHandledPerPartition {
		t.Errorf("got %d offsets remembered; want at most %d", got, maxHandledPerPartition)
	}
}
