package rawlog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/store"
)

// A reader may read a subset of a topic's columns into a struct of its own (the columns are
// matched by name; the others are not decoded): ClickKey gets the same values as ClickRow.
func TestProjectionReadsTheSameValues(t *testing.T) {
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clicks, _ := TopicByName(schemas.TopicClicks)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for p := range int32(2) {
		var values [][]byte
		for i := range 3000 {
			c := schemas.Click{ClickID: fmt.Sprintf("c-%d-%d", p, i), AdID: fmt.Sprintf("ad-%d", i%9), CampaignID: "camp", UserHash: "u", IPHash: "ip",
				Device: "phone", TS: day.Add(time.Duration(i) * 41 * time.Second).UnixMilli()}
			if i%3 == 0 {
				c.FraudScore, c.HasFraudScore = float64(i%100)/100, true
			}
			values = append(values, schemas.AppendClick(nil, c))
		}
		if err := WriteFlush(st, clicks, p, int64(p)*7, values); err != nil {
			t.Fatal(err)
		}
	}
	from, to := day, day.Add(24*time.Hour)
	var full []ClickKey
	if err := (Files[ClickRow]{Store: st, Topic: clicks.Name}).Read(context.Background(), from, to, func(_ int32, rows []ClickRow) error {
		for _, r := range rows {
			full = append(full, ClickKey{Partition: r.Partition, Offset: r.Offset, TS: r.TS, ClickID: r.ClickID, AdID: r.AdID, FraudScore: r.FraudScore})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got []ClickKey
	if err := (Files[ClickKey]{Store: st, Topic: clicks.Name}).Read(context.Background(), from, to, func(_ int32, rows []ClickKey) error {
		got = append(got, rows...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(full) || len(full) < 4000 {
		t.Fatalf("rows: got %d projected, %d full; want the same, over 4000", len(got), len(full))
	}
	byPos := map[[2]int64]ClickKey{}
	for _, r := range full {
		byPos[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	for _, g := range got {
		w := byPos[[2]int64{int64(g.Partition), g.Offset}]
		same := g.ClickID == w.ClickID && g.AdID == w.AdID && g.TS == w.TS && (g.FraudScore == nil) == (w.FraudScore == nil) &&
			(g.FraudScore == nil || *g.FraudScore == *w.FraudScore)
		if !same {
			t.Fatalf("partition %d offset %d: got %+v; want %+v", g.Partition, g.Offset, g, w)
		}
	}
}
