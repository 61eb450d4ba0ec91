package rawlog

import (
	"context"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/store"
)

// TestEveryTopicRoundTrips writes one record of each kept topic and reads it back as its row type.
func TestEveryTopicRoundTrips(t *testing.T) {
	ts := time.Date(2026, 12, 1, 7, 30, 0, 0, time.UTC).UnixMilli()
	score := 0.25
	ctx := context.Background()
	for _, tc := range []struct {
		topic string
		value []byte
		check func(t *testing.T, st store.Store)
	}{
		{schemas.TopicViews, schemas.AppendView(nil, schemas.View{ItemID: "i", ViewerID: "v", EventID: "e", TS: ts}), func(t *testing.T, st store.Store) {
			got := readOne[ViewRow](t, st, schemas.TopicViews)
			if want := (schemas.View{ItemID: "i", ViewerID: "v", EventID: "e", TS: ts}); got.View() != want || got.IsViewCount() || got.Count != 1 {
				t.Fatalf("got %+v; want %+v", got.View(), want)
			}
		}},
		{schemas.TopicViews, schemas.AppendViewCount(nil, schemas.ViewCount{ItemID: "i", Second: ts / 1000, Count: 900, SourceID: "edge-1", Seq: 7}), func(t *testing.T, st store.Store) {
			got := readOne[ViewRow](t, st, schemas.TopicViews)
			if want := (schemas.ViewCount{ItemID: "i", Second: ts / 1000, Count: 900, SourceID: "edge-1", Seq: 7}); !got.IsViewCount() || got.ViewCount() != want || got.TS != ts {
				t.Fatalf("got %+v; want a view count row of %+v", got, want)
			}
		}},
		{schemas.TopicLikes, schemas.AppendLike(nil, schemas.Like{ItemID: "i", UserID: "u", Liked: true, TS: ts, RequestID: "r"}), func(t *testing.T, st store.Store) {
			got := readOne[LikeRow](t, st, schemas.TopicLikes)
			if want := (schemas.Like{ItemID: "i", UserID: "u", Liked: true, TS: ts, RequestID: "r"}); got.Like() != want {
				t.Fatalf("got %+v; want %+v", got.Like(), want)
			}
		}},
		{schemas.TopicClicks, schemas.AppendClick(nil, schemas.Click{ClickID: "c1", AdID: "ad", CampaignID: "cp", UserHash: "uh", IPHash: "ih", Device: "mobile", TS: ts, FraudScore: score, HasFraudScore: true}), func(t *testing.T, st store.Store) {
			got := readOne[ClickRow](t, st, schemas.TopicClicks)
			if want := (schemas.Click{ClickID: "c1", AdID: "ad", CampaignID: "cp", UserHash: "uh", IPHash: "ih", Device: "mobile", TS: ts, FraudScore: score, HasFraudScore: true}); got.Click() != want {
				t.Fatalf("got %+v; want %+v", got.Click(), want)
			}
		}},
		{schemas.TopicFraudVerdicts, schemas.AppendFraudVerdict(nil, schemas.FraudVerdict{ClickID: "c1", AdID: "ad", Verdict: schemas.VerdictFraud, Reason: "bot", DecidedAt: ts}), func(t *testing.T, st store.Store) {
			got := readOne[FraudVerdictRow](t, st, schemas.TopicFraudVerdicts)
			if got.ClickID != "c1" || got.AdID != "ad" || got.Verdict != "fraud" || got.Reason != "bot" || got.DecidedAt != ts {
				t.Fatalf("got %+v; want the verdict written", got)
			}
		}},
	} {
		t.Run(tc.topic, func(t *testing.T) {
			topic, ok := TopicByName(tc.topic)
			if !ok {
				t.Fatalf("topic %s is not kept", tc.topic)
			}
			st, err := store.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			writeFlush(t, st, topic, 2, 40, [][]byte{tc.value})
			if refs, err := List(ctx, st, tc.topic, time.UnixMilli(ts).Truncate(time.Hour), time.UnixMilli(ts).Add(time.Hour)); err != nil || len(refs) != 1 {
				t.Fatalf("files: got %v, %v; want one", refs, err)
			}
			tc.check(t, st)
		})
	}
}

func readOne[T Row](t *testing.T, st store.Store, topic string) T {
	t.Helper()
	var rows []T
	err := Files[T]{Store: st, Topic: topic}.Read(context.Background(), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), func(_ int32, rs []T) error {
		rows = append(rows, rs...)
		return nil
	})
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows: got %d, %v; want 1", len(rows), err)
	}
	if p, off := rows[0].Pos(); p != 2 || off != 40 {
		t.Fatalf("position: got %d/%d; want 2/40", p, off)
	}
	return rows[0]
}

// TestViewFilesWithoutCountColumnsReadAsViews reads a views file of the shape written before
// view counts existed (no count, source_id, seq): every row is a view.
func TestViewFilesWithoutCountColumnsReadAsViews(t *testing.T) {
	type oldViewRow struct {
		Partition int32  `parquet:"partition"`
		Offset    int64  `parquet:"offset"`
		TS        int64  `parquet:"ts,timestamp(millisecond)"`
		ItemID    string `parquet:"item_id"`
		ViewerID  string `parquet:"viewer_id"`
		EventID   string `parquet:"event_id"`
	}
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 12, 1, 7, 30, 0, 0, time.UTC)
	f, err := st.Create(HourPrefix(schemas.TopicViews, ts))
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[oldViewRow](f, writerOptions(newPageCodec())...)
	if _, err := w.Write([]oldViewRow{{Partition: 2, Offset: 40, TS: ts.UnixMilli(), ItemID: "i", ViewerID: "v", EventID: "e"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(FileName(schemas.TopicViews, ts.Truncate(time.Hour), 2, 40, 40)); err != nil {
		t.Fatal(err)
	}
	got := readOne[ViewRow](t, st, schemas.TopicViews)
	if want := (schemas.View{ItemID: "i", ViewerID: "v", EventID: "e", TS: ts.UnixMilli()}); got.IsViewCount() || got.View() != want {
		t.Fatalf("got %+v; want the view %+v", got, want)
	}
	// The recount's projection reads the same file the same way.
	key := readOne[ViewKey](t, st, schemas.TopicViews)
	if want := (ViewKey{Partition: 2, Offset: 40, TS: ts.UnixMilli(), ItemID: "i", ViewerID: "v"}); key.IsViewCount() || key != want {
		t.Fatalf("got %+v; want %+v", key, want)
	}
}
