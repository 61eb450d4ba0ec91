package clicks

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The audit lists, below the ad's clicks and apart from them, the click and verdict records the
// aggregator set aside on the day: those whose payload names the ad and those whose payload
// names no ad (ad ?), with topic, partition, offset, key and reason; not the ones naming another
// ad, of another day, or of another source; a record the aggregator set aside again in a replay
// the next day once, on the day it was first set aside.
func TestAuditListsRejectedRecords(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, "audit_rejected", 0)
	// dead_letters expires its rows 90 days after seen_at, so the audited day is recent, and the
	// ad this run's own. No click of the day is produced: the other tests' days are years back
	// and increase in file order, and the Kafka source finds a day's stretch of the log by
	// record time, which a recent record produced between theirs would cut short.
	f.day = DayOf(testinfra.RecentNoon())
	noon := f.day.Add(12 * time.Hour)
	ad := fmt.Sprintf("ad-rejected-%d", time.Now().UnixNano())

	click := func(adID string, edit func(*schemas.Click)) []byte {
		c := schemas.Click{ClickID: "bad", AdID: adID, CampaignID: "c", UserHash: "u", IPHash: "i", Device: "web", TS: noon.UnixMilli()}
		edit(&c)
		return schemas.AppendClick(nil, c)
	}
	refused := func(topic string, part int32, off int64, key string, value []byte) deadletter.Letter {
		var err error
		if topic == schemas.TopicFraudVerdicts {
			_, err = schemas.DecodeFraudVerdict(value)
		} else {
			_, err = schemas.DecodeClick(value)
		}
		if err == nil {
			t.Fatalf("%s %d/%d: the decoder accepts it; want a refused record", topic, part, off)
		}
		return deadletter.OfRecord(topic, part, off, []byte(key), value, err)
	}
	tests := []struct {
		name   string
		letter deadletter.Letter
		seen   []time.Time // each write of it, the first first
		wantAd string      // the ad column of its line: the ad, "?", or "" for no line
	}{
		{"a click of the ad", refused(schemas.TopicClicks, 0, 5, ad, click(ad, func(c *schemas.Click) { c.TS = 0 })), []time.Time{noon}, ad},
		{"a verdict of the ad", refused(schemas.TopicFraudVerdicts, 1, 3, ad,
			schemas.AppendFraudVerdict(nil, schemas.FraudVerdict{ClickID: "k", AdID: ad, Verdict: 7, DecidedAt: noon.UnixMilli()})), []time.Time{noon.Add(time.Hour)}, ad},
		{"garbage", refused(schemas.TopicClicks, 0, 6, ad, []byte("junk")), []time.Time{noon}, "?"},
		{"empty, without a key", refused(schemas.TopicClicks, 2, 8, "", nil), []time.Time{noon}, "?"},
		{"a click without an ad", refused(schemas.TopicClicks, 2, 10, ad, click("", func(*schemas.Click) {})), []time.Time{noon}, "?"},
		{"set aside again by a replay the next day", refused(schemas.TopicClicks, 3, 1, ad, click(ad, func(c *schemas.Click) { c.Device = "" })),
			[]time.Time{noon.Add(11 * time.Hour), noon.Add(13 * time.Hour)}, ad},
		{"a click of another ad", refused(schemas.TopicClicks, 2, 9, ad, click("other-ad", func(c *schemas.Click) { c.TS = 0 })), []time.Time{noon}, ""},
		{"the day before", refused(schemas.TopicClicks, 0, 2, ad, click(ad, func(c *schemas.Click) { c.TS = 0 })), []time.Time{noon.Add(-24 * time.Hour)}, ""},
		{"the day after", refused(schemas.TopicClicks, 0, 40, ad, click(ad, func(c *schemas.Click) { c.TS = 0 })), []time.Time{noon.Add(24 * time.Hour)}, ""},
		{"a view", deadletter.Letter{Source: schemas.TopicViews, Partition: 0, Offset: 5, Reason: "decode view: junk", Payload: []byte("junk")}, []time.Time{noon}, ""},
	}
	for _, tt := range tests {
		for _, at := range tt.seen {
			w := deadletter.New(func() time.Time { return at }, infra.Logger, prometheus.NewRegistry())
			if err := w.Write(ctx, f.conn, []deadletter.Letter{tt.letter}); err != nil {
				t.Fatal(err)
			}
		}
	}

	code, stdout, stderr := command(t, ctx, f.args("clicks", "audit", "--ad", ad, "--date", f.day.Format(time.DateOnly))...)
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	head, rejected, ok := strings.Cut(stdout, "\n\n")
	if !ok {
		t.Fatalf("audit output %q: want the rejected records after a blank line", stdout)
	}
	wantHead := fmt.Sprintf("# ad %s on %s: recomputed from the log now: exact 0 billable 0; no complete version stored yet", ad, f.day.Format(time.DateOnly))
	if first, _, _ := strings.Cut(head, "\n"); first != wantHead {
		t.Errorf("audit summary: got %q; want %q", first, wantHead)
	}
	lines := strings.Split(strings.TrimSpace(rejected), "\n")
	wantSummary := fmt.Sprintf("# rejected on %s (click and verdict records the aggregator set aside in dead_letters, by the UTC day first set aside; counted nowhere): 3 naming ad %s, 3 whose payload names no ad (ad ?, possibly %s's), 1 naming other ads (not listed)",
		f.day.Format(time.DateOnly), ad, ad)
	if lines[0] != wantSummary {
		t.Errorf("rejected summary: got %q; want %q", lines[0], wantSummary)
	}
	if len(lines) < 2 || strings.Join(strings.Fields(lines[1]), " ") != "source partition offset ad key reason bytes seen_at" {
		t.Fatalf("rejected records: got %q; want a header line, then the records", lines[1:])
	}
	// source partition offset -> the line's other columns, single-spaced
	listed := map[string]string{}
	for _, l := range lines[2:] {
		fs := strings.Fields(l)
		at := strings.Join(fs[:3], " ")
		if _, dup := listed[at]; dup {
			t.Errorf("%s listed twice", at)
		}
		listed[at] = strings.Join(fs[3:], " ")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.letter
			got, ok := listed[fmt.Sprintf("%s %d %d", l.Source, l.Partition, l.Offset)]
			want := fmt.Sprintf("%s %q %q %d %s", tt.wantAd, l.Ref, l.Reason, len(l.Payload), tt.seen[0].UTC().Format(time.RFC3339Nano))
			switch {
			case tt.wantAd == "" && ok:
				t.Errorf("got line %q; want none", got)
			case tt.wantAd != "" && got != want:
				t.Errorf("got line %q; want %q", got, want)
			}
		})
	}
	if len(listed) != 6 {
		t.Errorf("got %d rejected lines; want 6", len(listed))
	}
}
