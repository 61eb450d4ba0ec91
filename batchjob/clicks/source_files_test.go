package clicks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/logread"
	"github.com/tallypipeline/tally/platform/progress"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
	"github.com/tallypipeline/tally/sink/storetest"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The real sink writes the log into files. A run from the files and one from Kafka give the
// oracle's rows; so do they after records the files do not hold were produced (the tail, read
// from Kafka). The version says which source it read.
func TestFilesSourceMatchesKafka(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "files", 40)
	produce(t, ctx, genDay(f.day, 3000, 40, 5))
	dir := t.TempDir()
	st, err := store.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	group := fmt.Sprintf("sink-clicks-%d", time.Now().UnixNano())
	clicksTopic, _ := rawlog.TopicByName(schemas.TopicClicks)
	verdictsTopic, _ := rawlog.TopicByName(schemas.TopicFraudVerdicts)
	storetest.CatchUp(t, ctx, infra.Kafka.Addr(), group, st, clicksTopic, verdictsTopic)

	check := func(t *testing.T, want []Row, cases map[string]Source) {
		for wantSource, src := range cases {
			d := f.deps()
			d.Source = src
			d.Progress = progress.Start(progress.Options{What: "records", Never: true})
			rep, err := Run(ctx, f.day, d)
			d.Progress.Stop()
			if err != nil {
				t.Fatal(err)
			}
			// The progress line's total is known before the read and is what the read found (the
			// line's thousands separators dropped).
			if want := fmt.Sprintf("progress: %d/%d records (100%%)", rep.Read.Records, rep.Read.Records); !strings.HasPrefix(strings.ReplaceAll(d.Progress.Line(), ",", ""), want) {
				t.Errorf("%s: progress: got %q; want it to start %q", wantSource, d.Progress.Line(), want)
			}
			_, rows, _ := f.report(t, rep.Version)
			if diff := diffRows(rows, want); diff != "" || rep.Source != wantSource {
				t.Fatalf("got %s: %s; want the oracle's rows from %s", rep.Summary(), diff, wantSource)
			}
			var stored string
			if err := f.conn.QueryRow(ctx, "SELECT source FROM click_report_versions WHERE date = ? AND version = ?", f.day, rep.Version).Scan(&stored); err != nil || stored != wantSource {
				t.Fatalf("source column of version %d: got %q (%v); want %q", rep.Version, stored, err, wantSource)
			}
		}
	}
	before := oracle(t, ctx, f.day)
	t.Run("caught up", func(t *testing.T) {
		check(t, before, map[string]Source{"kafka": source(), "parquet": NewFilesSource(st, source(), group)})
	})

	// The tail: clicks of the day and a fraud verdict on a billable click, after the sink stopped.
	ad := before[0].AdID
	victim := billableClick(t, ctx, f.day, ad)
	var tail []*kgo.Record
	for i := range 5 {
		ts := f.day.Add(23*time.Hour + time.Duration(i)*time.Minute)
		tail = append(tail, clickRec(schemas.Click{ClickID: fmt.Sprintf("tail-%s-%d", f.day.Format("20060102"), i), AdID: ad,
			CampaignID: "camp", UserHash: "u", IPHash: "ip", Device: "phone", TS: ts.UnixMilli()}, ts))
	}
	tail = append(tail, verdictRec(schemas.FraudVerdict{ClickID: victim, AdID: ad, Verdict: schemas.VerdictFraud, Reason: "chargeback",
		DecidedAt: f.day.Add(30 * time.Hour).UnixMilli()}, f.day.Add(30*time.Hour)))
	produce(t, ctx, tail)
	want := oracle(t, ctx, f.day)
	if want[0].ExactCount != before[0].ExactCount+5 || want[0].BillableCount != before[0].BillableCount+4 {
		t.Fatalf("oracle with the tail: got %+v; want %+v with 5 clicks and 4 billable more", want[0], before[0])
	}
	// The files hold the day, the tail is in no file: a run that ignored Kafka would miss it.
	inFiles := 0
	if err := (rawlog.Files[rawlog.ClickRow]{Store: st, Topic: schemas.TopicClicks}).Read(ctx, f.day, f.day.AddDate(0, 0, 1),
		func(_ int32, rows []rawlog.ClickRow) error {
			inFiles += len(rows)
			for _, r := range rows {
				if strings.HasPrefix(r.ClickID, "tail-") {
					return fmt.Errorf("tail click %s at offset %d is in a file", r.ClickID, r.Offset)
				}
			}
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	if inFiles < 3000 {
		t.Fatalf("clicks of the day in files: got %d; want at least the 3000 generated", inFiles)
	}
	t.Run("tail", func(t *testing.T) {
		check(t, want, map[string]Source{"kafka": source(), "parquet+kafka": NewFilesSource(st, source(), group)})
	})
	// The command finds the files through the sink's settings; without them it reads Kafka.
	t.Run("command", func(t *testing.T) {
		for wantSource, extra := range map[string][]string{
			"parquet+kafka": {"--sink.dir", dir, "--sink.group", group},
			"kafka":         {"--sink.dir", t.TempDir()},
		} {
			code, stdout, stderr := command(t, ctx, f.args(append([]string{"clicks", "--date", f.day.Format(time.DateOnly)}, extra...)...)...)
			if code != 0 || !strings.Contains(stdout, "("+wantSource+")") {
				t.Fatalf("batchjob clicks %v: exit %d, stdout %q; want 0 and a summary from %s\n%s", extra, code, stdout, wantSource, stderr)
			}
			_, rows, _ := f.report(t, 0)
			if diff := diffRows(rows, want); diff != "" {
				t.Fatalf("batchjob clicks %v: %s", extra, diff)
			}
		}
	})
}

func TestTailSpans(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sp       logread.Span
		complete int64
		has      bool
		want     int64 // From of the tail; -1: an error
	}{
		{"files hold part of the span", logread.Span{Start: 0, From: 10, Stop: 100}, 60, true, 60},
		{"files hold none of the span", logread.Span{Start: 0, From: 10, Stop: 100}, 5, true, 10},
		{"no marker: Kafka only", logread.Span{Start: 0, From: 10, Stop: 100}, 0, false, 10},
		{"files beyond the snapshot", logread.Span{Start: 0, From: 10, Stop: 100}, 150, true, 150},
		{"Kafka trimmed, the files hold the rest", logread.Span{Start: 50, From: 50, Stop: 100}, 70, true, 70},
		{"Kafka trimmed below the wanted time", logread.Span{Start: 50, From: 60, Stop: 100, TimeCut: true}, 20, true, 60},
		{"gap between files and Kafka", logread.Span{Start: 50, From: 50, Stop: 100}, 20, true, -1},
		{"gap, no files", logread.Span{Start: 50, From: 50, Stop: 100}, 0, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			complete := map[int32]int64{}
			if tc.has {
				complete[3] = tc.complete
			}
			got, err := tailSpans("clicks", map[int32]logread.Span{3: tc.sp}, complete)
			switch {
			case tc.want < 0 && err == nil:
				t.Fatalf("got tail %+v; want a gap error", got[3])
			case tc.want >= 0 && (err != nil || got[3].From != tc.want || got[3].Stop != tc.sp.Stop):
				t.Fatalf("got tail %+v, %v; want From %d Stop %d", got[3], err, tc.want, tc.sp.Stop)
			}
		})
	}
}
