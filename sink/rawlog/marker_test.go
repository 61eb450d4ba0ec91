package rawlog

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/tallypipeline/tally/sink/store"
)

func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		name      string
		markers   map[int32]Marker
		committed map[int32]int64 // nil: no group offsets asked
		fail      bool            // the group offsets cannot be read
		want      map[int32]int64
	}{
		{"no marker", nil, map[int32]int64{0: 50}, false, map[int32]int64{}},
		{"marker, no committed offsets", map[int32]Marker{0: {10, 19}, 3: {0, 4}}, nil, false, map[int32]int64{0: 10, 3: 0}},
		{"committed inside the marker's flush", map[int32]Marker{0: {10, 19}}, map[int32]int64{0: 10}, false, map[int32]int64{0: 10}},
		{"committed past the marker's flush", map[int32]Marker{0: {10, 19}, 1: {5, 5}}, map[int32]int64{0: 20, 1: 9}, false, map[int32]int64{0: 20, 1: 6}},
		{"committed offsets unreadable", map[int32]Marker{0: {10, 19}}, map[int32]int64{}, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			for p, m := range tc.markers {
				if err := WriteMarker(st, "likes", p, m); err != nil {
					t.Fatal(err)
				}
			}
			// Another topic's marker and a stray file are not this topic's markers.
			if err := WriteMarker(st, "views", 2, Marker{0, 99}); err != nil {
				t.Fatal(err)
			}
			f, _ := st.Create("_flushing/likes/")
			_, _ = f.Write([]byte("x"))
			_ = f.Commit("_flushing/likes/notes.txt")
			var committed func() (map[int32]int64, error)
			if tc.committed != nil {
				committed = func() (map[int32]int64, error) {
					if tc.fail {
						return nil, errors.New("broker down")
					}
					return tc.committed, nil
				}
			}
			got, err := Complete(context.Background(), st, "likes", committed)
			if tc.fail {
				if err == nil {
					t.Fatalf("got %v; want an error", got)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// A marker's contents come from the store: anything there either reads as a valid marker or is
// an error.
func FuzzReadMarker(f *testing.F) {
	f.Add([]byte(`{"first":10,"last":19}`))
	f.Add([]byte(`{"first":-1,"last":3}`))
	f.Add([]byte(`{"first":5,"last":4}`))
	f.Add([]byte(`not json`))
	st, err := store.NewLocal(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := st.Create("_flushing/likes/")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(MarkerName("likes", 0)); err != nil {
			t.Fatal(err)
		}
		m, err := ReadMarker(context.Background(), st, "likes", 0)
		if err == nil && (m == nil || m.First < 0 || m.First > m.Last) {
			t.Fatalf("%q: got %+v; want a marker with 0 <= first <= last, or an error", b, m)
		}
	})
}
