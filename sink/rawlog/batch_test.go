package rawlog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/store"
)

// writeFlush writes values of partition p as one flush into st and returns the rows per hour.
func writeFlush(t testing.TB, st store.Store, topic Topic, p int32, first int64, values [][]byte) map[time.Time]int {
	t.Helper()
	if err := WriteFlush(st, topic, p, first, values); err != nil {
		t.Fatal(err)
	}
	rows := map[time.Time]int{}
	for _, v := range values {
		if row, err := decodeAny(topic.Name, v); err == nil {
			rows[HourOf(row)]++
		}
	}
	return rows
}

// decodeAny is the event time of a record of topic.
func decodeAny(topic string, v []byte) (int64, error) {
	switch topic {
	case "views":
		r, _, err := decodeView(0, 0, v)
		return r.TS, err
	case "likes":
		r, _, err := decodeLike(0, 0, v)
		return r.TS, err
	case "clicks":
		r, _, err := decodeClick(0, 0, v)
		return r.TS, err
	default:
		r, _, err := decodeFraudVerdict(0, 0, v)
		return r.DecidedAt, err
	}
}

func TestBatchWritesHourFilesReadBackInOrder(t *testing.T) {
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	views, _ := TopicByName(schemas.TopicViews)
	base := time.Date(2026, 12, 1, 9, 59, 0, 0, time.UTC).UnixMilli()
	var values [][]byte
	var want []schemas.View
	for i := range 5000 {
		ts := base + int64(i%3)*60_000 // 09:59, 10:00, 10:01: two hours interleaved
		if i%1000 == 7 {
			ts = base - 3*3600_000 // a late event: its own hour, 06
		}
		v := schemas.View{ItemID: fmt.Sprintf("item-%d", i%17), ViewerID: fmt.Sprintf("u%d", i), EventID: fmt.Sprintf("e%d", i), TS: ts}
		want = append(want, v)
		values = append(values, schemas.AppendView(nil, v))
	}
	values = append(values, []byte{1, 9, 9}) // undecodable: in no file, but inside the range
	rows := writeFlush(t, st, views, 3, 100, values)
	if len(rows) != 3 || rows[time.UnixMilli(base).UTC().Truncate(time.Hour)]+rows[time.UnixMilli(base+60_000).UTC().Truncate(time.Hour)] != 5000-5 {
		t.Fatalf("rows per hour: got %v; want three hours, 4995 rows in 09 and 10", rows)
	}
	ctx := context.Background()
	refs, err := List(ctx, st, views.Name, time.UnixMilli(base-4*3600_000), time.UnixMilli(base+3600_000))
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 3 {
		t.Fatalf("files: got %d (%v); want 3", len(refs), refs)
	}
	var got []ViewRow
	if err := ReadInOrder(ctx, st, refs, func(p int32, rows []ViewRow) error {
		if p != 3 {
			t.Errorf("partition: got %d; want 3", p)
		}
		got = append(got, rows...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("rows read: got %d; want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Offset != 100+int64(i) || r.View() != want[i] {
			t.Fatalf("row %d: got %+v; want offset %d and %+v", i, r, 100+i, want[i])
		}
	}
}

func TestFilesReadKeepsOnlyTheSpan(t *testing.T) {
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	views, _ := TopicByName(schemas.TopicViews)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var values [][]byte
	for i, ts := range []time.Time{day.Add(-time.Minute), day, day.Add(23 * time.Hour), day.Add(24 * time.Hour)} {
		values = append(values, schemas.AppendView(nil, schemas.View{ItemID: "a", ViewerID: fmt.Sprint(i), TS: ts.UnixMilli()}))
	}
	writeFlush(t, st, views, 0, 0, values)
	var offsets []int64
	err = Files[ViewRow]{Store: st, Topic: views.Name}.Read(context.Background(), day, day.Add(24*time.Hour), func(_ int32, rows []ViewRow) error {
		for _, r := range rows {
			offsets = append(offsets, r.Offset)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(offsets) != "[1 2]" {
		t.Fatalf("offsets read: got %v; want [1 2] (the day's two views)", offsets)
	}
	for _, tc := range []struct {
		from time.Time
		want bool
	}{{day, true}, {day.Add(-48 * time.Hour), false}} {
		ok, err := Present(context.Background(), st, views.Name, tc.from, tc.from.Add(24*time.Hour))
		if err != nil || ok != tc.want {
			t.Errorf("Present from %s: got %v, %v; want %v", tc.from, ok, err, tc.want)
		}
	}
}
