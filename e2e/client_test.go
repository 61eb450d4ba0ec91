package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tallypipeline/tally/client"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// checkClient drives the real collector through the Go client: a view, a batch through the
// Batcher, a bad line, a like, then the counts, the series and the user's likes; fraud verdicts;
// a daily click report, written to conn as batchjob clicks writes one, read a page at a time.
func checkClient(t *testing.T, api string, conn driver.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(client.Options{BaseURL: api})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := c.SendView(ctx, client.View{ItemID: "client-item", ViewerID: "cv0", TS: now}); err != nil {
		t.Fatalf("SendView: %v", err)
	}
	b := c.NewBatcher(client.BatcherOptions{MaxEvents: 7, MaxDelay: 50 * time.Millisecond})
	for i := 1; i <= 20; i++ {
		if err := b.Add(ctx, client.View{ItemID: "client-item", ViewerID: fmt.Sprintf("cv%d", i)}); err != nil {
			t.Fatalf("Batcher.Add: %v", err)
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Batcher.Close: %v", err)
	}
	if st := b.Stats(); st.Accepted != 20 || st.Batches != 3 || st.Failed != 0 {
		t.Errorf("batcher stats: got %+v; want 20 accepted in 3 bodies", st)
	}
	res, err := c.SendEvents(ctx, []client.Event{client.View{ItemID: "client-item", ViewerID: "cv21"}, client.View{ItemID: "bad/id", ViewerID: "v"}})
	if err != nil || res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].Line != 2 || res.Rejected[0].Field != "item_id" {
		t.Errorf("SendEvents with a bad line: got %+v, %v; want 1 accepted, line 2 rejected for item_id", res, err)
	}
	_, err = c.SendEvents(ctx, []client.Event{client.View{ItemID: "", ViewerID: "v"}})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("SendEvents with only bad lines: got %v; want a 400 APIError", err)
	}
	st, err := c.Like(ctx, "client-item", "cu1", "")
	if err != nil || !st.Liked || st.Likes != 1 {
		t.Errorf("Like: got %+v, %v; want liked, 1 like", st, err)
	}
	var got []client.Counts
	waitFor(t, 30*time.Second, "client-item counts through the client", func() bool {
		got, err = c.Counts(ctx, "client-item", "client-never")
		return err == nil && len(got) == 2 && got[0].Views == 22 && got[0].UniqueViewers == 22
	})
	want := []client.Counts{{ItemID: "client-item", Views: 22, UniqueViewers: 22, Likes: 1}, {ItemID: "client-never"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Counts: got %+v; want %+v", got, want)
	}
	// The series come from the rollups, written half a sketch interval after the sketches that
	// the unique count above waited for.
	var s client.Series
	var sum int64
	testinfra.WaitFor(t, 30*time.Second, "client-item's hourly series", func() (bool, string) {
		s, err = c.Views(ctx, "client-item", client.SeriesQuery{From: now.Add(-time.Hour), Granularity: client.Hour})
		sum = 0
		for _, p := range s.Points {
			sum += p.Views
		}
		return err == nil && s.Granularity == client.Hour && sum == 22, fmt.Sprintf("got %+v (sum %d), %v; want hourly points summing to 22", s, sum, err)
	})
	// Unique viewers per bucket and over the range: hours from the hour registers written with
	// the sketches, before the rollups the series waited for; minutes from the minute registers
	// in the same rows; days from the day sketches written with the all-time one the count
	// above read.
	checkUnique := func(s client.Series, err error) {
		t.Helper()
		var sum int64
		for _, p := range s.Points {
			if p.UniqueViewers != nil {
				sum += *p.UniqueViewers
			}
		}
		if err != nil || s.UniqueViewers == nil || *s.UniqueViewers != 22 || sum != 22 {
			t.Errorf("%s series: got %+v (buckets' unique viewers summing to %d), %v; want 22 unique viewers over the range and summed", s.Granularity, s, sum, err)
		}
	}
	checkUnique(s, nil)
	checkUnique(c.Views(ctx, "client-item", client.SeriesQuery{From: now.Add(-time.Hour), Granularity: client.Minute}))
	checkUnique(c.Views(ctx, "client-item", client.SeriesQuery{From: now.Add(-24 * time.Hour), Granularity: client.Day}))
	liked, err := c.Liked(ctx, "cu1", "client-item", "other")
	if err != nil || !liked["client-item"] || liked["other"] {
		t.Errorf("Liked: got %v, %v; want client-item only", liked, err)
	}
	if _, err := c.Counts(ctx); err == nil {
		t.Error("Counts with no ids: got nil error; want one")
	}
	checkClientVerdicts(t, ctx, c)
	checkClientReport(t, ctx, c, conn)
}

func checkClientVerdicts(t *testing.T, ctx context.Context, c *client.Client) {
	res, err := c.SendVerdicts(ctx, client.Verdict{ClickID: "client-click", AdID: "client-ad", Fraud: true, Reason: "chargeback"},
		client.Verdict{ClickID: "client-click-2"}) // an unsigned id needs its ad
	if err != nil || res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].Line != 2 || res.Rejected[0].Field != "ad_id" {
		t.Errorf("SendVerdicts with a bad line: got %+v, %v; want 1 accepted, line 2 rejected for ad_id", res, err)
	}
	res, err = c.SendVerdicts(ctx, client.Verdict{ClickID: "client-click-3", DecidedAt: time.Now().Add(time.Hour)})
	if !client.IsStatus(err, 400) || len(res.Rejected) != 1 {
		t.Errorf("SendVerdicts with only bad lines: got %+v, %v; want a 400 APIError listing the line", res, err)
	}
	if _, err := c.SendVerdicts(ctx); err == nil {
		t.Error("SendVerdicts with no verdicts: got nil error; want one")
	}
}

func checkClientReport(t *testing.T, ctx context.Context, c *client.Client, conn driver.Conn) {
	day := time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC)
	if _, err := c.DailyReport(ctx, day, client.ReportQuery{}); !client.IsStatus(err, 404) {
		t.Fatalf("DailyReport of a day without a version: got %v; want a 404 APIError", err)
	}
	computed := day.Add(26 * time.Hour).Truncate(time.Millisecond)
	ads := []client.AdCount{{AdID: "ra", ExactCount: 5, BillableCount: 4}, {AdID: "rb", ExactCount: 3, BillableCount: 3}, {AdID: "rc", ExactCount: 1}}
	for _, a := range ads {
		if err := conn.Exec(ctx, "INSERT INTO click_reports_daily (date, version, ad_id, exact_count, billable_count, computed_at) VALUES (?, 1, ?, ?, ?, ?)",
			day, a.AdID, a.ExactCount, a.BillableCount, computed); err != nil {
			t.Fatal(err)
		}
	}
	devices := []client.GroupCount{{Value: "desktop", ExactCount: 2, BillableCount: 1}, {Value: "phone", ExactCount: 7, BillableCount: 6}}
	for _, g := range devices {
		if err := conn.Exec(ctx, "INSERT INTO click_reports_by (date, version, dimension, value, exact_count, billable_count) VALUES (?, 1, 'device', ?, ?, ?)",
			day, g.Value, g.ExactCount, g.BillableCount); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Exec(ctx, `INSERT INTO click_report_versions (date, version, started_at, computed_at, source, ads, exact_count, billable_count, duplicates, fraud, records_read)
		VALUES (?, 1, ?, ?, 'kafka', 3, 9, 7, 0, 0, 9)`, day, computed, computed); err != nil {
		t.Fatal(err)
	}
	if r, err := c.DailyReport(ctx, day, client.ReportQuery{By: client.ReportByDevice}); err != nil || r.By != client.ReportByDevice || fmt.Sprint(r.Groups) != fmt.Sprint(devices) || r.Ads != nil {
		t.Errorf("DailyReport by device: got %+v, %v; want by device, groups %+v and no ads", r, err, devices)
	}
	var got []client.AdCount
	q := client.ReportQuery{Limit: 2}
	for page := 1; ; page++ {
		r, err := c.DailyReport(ctx, day, q)
		if err != nil {
			t.Fatalf("DailyReport page %d: %v", page, err)
		}
		want := client.ReportTotals{Ads: 3, ExactCount: 9, BillableCount: 7}
		if r.Date != "2026-03-14" || r.Version != 1 || r.LatestVersion != 1 || !r.Final || !r.ComputedAt.Equal(computed) || r.Totals != want {
			t.Errorf("DailyReport page %d: got %+v; want date 2026-03-14, version 1 of 1, final, computed at %v, totals %+v", page, r, computed, want)
		}
		got = append(got, r.Ads...)
		if r.NextAfter == "" || page > len(ads) {
			break
		}
		q.Version, q.After = r.Version, r.NextAfter
	}
	if fmt.Sprint(got) != fmt.Sprint(ads) {
		t.Errorf("DailyReport pages: got %+v; want %+v", got, ads)
	}
	if _, err := c.DailyReport(ctx, day, client.ReportQuery{Version: 2}); !client.IsStatus(err, 404) {
		t.Errorf("DailyReport of a version not written: got %v; want a 404 APIError", err)
	}
}
