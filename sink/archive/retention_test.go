package archive_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/sink/archive"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

func TestRetainDeletesWholeExpiredHoursAndLogsThem(t *testing.T) {
	ctx := context.Background()
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 8, 10, 30, 0, 0, time.UTC)
	put := func(topic string, hour time.Time) {
		f, err := st.Create(rawlog.HourPrefix(topic, hour))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(f, "x")
		if err := f.Commit(rawlog.FileName(topic, hour, 0, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	keep := 7 * 24 * time.Hour
	// Hour 09 of Dec 1 ended at 10:00, more than 7 days before 10:30 on Dec 8; hour 10 ends at
	// 11:00, less than 7 days ago, and stays whole.
	for _, h := range []time.Time{
		time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC),
	} {
		put("views", h)
		put("likes", h)
	}
	var logs bytes.Buffer
	n, err := archive.Retain(ctx, st, "views", keep, now, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil || n != 2 {
		t.Fatalf("Retain: got %d deleted, %v; want 2", n, err)
	}
	names, _ := st.List(ctx, "views/")
	want := []string{rawlog.FileName("views", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), 0, 0, 1), rawlog.FileName("views", time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC), 0, 0, 1)}
	if !slices.Equal(names, want) {
		t.Fatalf("views left: got %v; want %v", names, want)
	}
	if c := strings.Count(logs.String(), "deleted expired sink hour"); c != 2 || !strings.Contains(logs.String(), "hour=2026-12-01T09:00:00Z") {
		t.Fatalf("log: got %d deletions logged (%s); want 2, naming each hour", c, logs.String())
	}
	if names, _ := st.List(ctx, "likes/"); len(names) != 4 {
		t.Fatalf("likes left: got %d files; want all 4 (another topic, its own retention)", len(names))
	}
}
