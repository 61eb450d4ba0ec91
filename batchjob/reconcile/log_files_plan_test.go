package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/sink/rawlog"
)

func TestPlanFiles(t *testing.T) {
	hour := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ref := func(p int32, first, last int64, h int) rawlog.FileRef {
		at := hour.Add(time.Duration(h) * time.Hour)
		return rawlog.FileRef{Name: rawlog.FileName("likes", at, p, first, last), Topic: "likes", Hour: at, Partition: p, First: first, Last: last}
	}
	for _, tc := range []struct {
		name     string
		refs     []rawlog.FileRef
		complete int64 // of partition 0; -1: no marker
		start    int64 // Kafka's first offset of partition 0
		use      int   // how many of refs are read
		from     int64 // where Kafka is read from; -1: a gap error
	}{
		{"two flushes, one in two hours", []rawlog.FileRef{ref(0, 0, 9, 0), ref(0, 0, 9, 1), ref(0, 10, 19, 1)}, 20, 0, 3, 20},
		{"the marker's flush is not complete", []rawlog.FileRef{ref(0, 0, 9, 0), ref(0, 10, 19, 1)}, 10, 0, 1, 10},
		{"no marker: Kafka alone", []rawlog.FileRef{ref(0, 0, 9, 0)}, -1, 0, 0, 0},
		{"Kafka trimmed, files hold it", []rawlog.FileRef{ref(0, 0, 9, 0), ref(0, 10, 19, 1)}, 20, 15, 2, 20},
		{"files start after Kafka: Kafka alone", []rawlog.FileRef{ref(0, 5, 9, 0)}, 10, 0, 0, 0},
		{"files start where Kafka does", []rawlog.FileRef{ref(0, 5, 9, 0)}, 10, 5, 1, 10},
		{"a hole Kafka still holds", []rawlog.FileRef{ref(0, 0, 9, 0), ref(0, 15, 19, 1)}, 20, 3, 1, 10},
		{"a hole Kafka lost", []rawlog.FileRef{ref(0, 0, 9, 0), ref(0, 15, 19, 1)}, 20, 12, 0, -1},
		{"files end before Kafka starts", []rawlog.FileRef{ref(0, 0, 9, 0)}, 10, 12, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			complete := map[int32]int64{1: 4}
			if tc.complete >= 0 {
				complete[0] = tc.complete
			}
			refs := append(slices.Clone(tc.refs), ref(1, 0, 3, 0)) // partition 1: one complete flush
			use, from, err := planFiles("likes", refs, complete, likestate.Snapshot{0: 30, 1: 4}, map[int32]int64{0: tc.start, 1: 0})
			if tc.from < 0 {
				if err == nil || !strings.Contains(err.Error(), "gap") {
					t.Fatalf("got files %v, from %v, err %v; want a gap error", use, from, err)
				}
				return
			}
			var got []string
			for _, r := range use {
				if r.Partition == 0 {
					got = append(got, fmt.Sprint(r.First, "-", r.Last))
				}
			}
			var want []string
			for _, r := range tc.refs[:tc.use] {
				want = append(want, fmt.Sprint(r.First, "-", r.Last))
			}
			if err != nil || !slices.Equal(got, want) || from[0] != tc.from || from[1] != 4 {
				t.Fatalf("got files %v, Kafka from %v, %v; want files %v, Kafka from %d (partition 1 from 4)", got, from, err, want, tc.from)
			}
		})
	}
}
