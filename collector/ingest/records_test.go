package ingest

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"tally/schemas"
)

// TestRecordBuilderMatchesViewRecord checks that a batch's records, built into shared buffers,
// are the ones viewRecord builds alone, and that building later ones (past both initial sizes,
// so the buffers are reallocated) leaves the earlier ones unchanged.
func TestRecordBuilderMatchesViewRecord(t *testing.T) {
	tests := []struct {
		name    string
		n, size int
	}{
		{"sized for the batch", 50, 1 << 16},
		{"buffers too small", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rb := newRecordBuilder(tt.n, tt.size)
			var views []schemas.View
			var got []*kgo.Record
			for i := range 50 {
				v := schemas.View{ItemID: "item-" + strings.Repeat("x", i), ViewerID: "v" + strconv.Itoa(i), EventID: "e" + strconv.Itoa(i%3), TS: int64(i) * 1000}
				views = append(views, v)
				got = append(got, rb.view(v))
			}
			for i, v := range views {
				want := viewRecord(v)
				if got[i].Topic != want.Topic || !bytes.Equal(got[i].Key, want.Key) || !bytes.Equal(got[i].Value, want.Value) {
					t.Errorf("record %d: got %s %q %x; want %s %q %x", i, got[i].Topic, got[i].Key, got[i].Value, want.Topic, want.Key, want.Value)
				}
			}
		})
	}
}
