package clicks

import (
	"slices"
	"testing"
	"time"
)

var testDay = time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)

// at is a time on the test day, or around it.
func at(h, m int) int64 {
	return testDay.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute).UnixMilli()
}

func TestTallyRows(t *testing.T) {
	type clk struct {
		id, ad string
		ts     int64
		score  float64
	}
	c := func(id, ad string, ts int64) clk { return clk{id: id, ad: ad, ts: ts} }
	tests := []struct {
		name     string
		rules    Rules
		clicks   []clk
		verdicts []Verdict
		want     []Row
		wantDay  DayStats
	}{
		{"one click", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 0))}, nil,
			[]Row{{"a", 1, 1}}, DayStats{Ads: 1, Exact: 1, Billable: 1}},
		{"repeat 5 minutes later counts once", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 0)), c("k1", "a", at(1, 5))}, nil,
			[]Row{{"a", 1, 1}}, DayStats{Ads: 1, Exact: 1, Billable: 1, Duplicates: 1}},
		{"repeat 20 minutes later counts once", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 20)), c("k1", "a", at(1, 0))}, nil,
			[]Row{{"a", 1, 1}}, DayStats{Ads: 1, Exact: 1, Billable: 1, Duplicates: 1}},
		{"repeat of yesterday's click is not counted", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(-1, 0)), c("k1", "a", at(0, 10)), c("k2", "a", at(0, 11))}, nil,
			[]Row{{"a", 1, 1}}, DayStats{Ads: 1, Exact: 1, Billable: 1, Duplicates: 1}},
		{"yesterday's clicks alone make no row", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(-3, 0))}, nil, nil, DayStats{}},
		{"same id for two ads: the first occurrence's ad", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "b", at(2, 0)), c("k1", "a", at(1, 0))}, nil,
			[]Row{{"a", 1, 1}}, DayStats{Ads: 1, Exact: 1, Billable: 1, Duplicates: 1}},
		{"fraud verdict", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 0)), c("k2", "a", at(1, 1))},
			[]Verdict{{ClickID: "k1", Fraud: true, DecidedAt: at(5, 0)}},
			[]Row{{"a", 2, 1}}, DayStats{Ads: 1, Exact: 2, Billable: 1, Fraud: 1}},
		{"latest verdict wins whatever the order read", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 0))},
			[]Verdict{{ClickID: "k1", Fraud: false, DecidedAt: at(9, 0)}, {ClickID: "k1", Fraud: true, DecidedAt: at(5, 0)}},
			[]Row{{"a", 1, 1}}, DayStats{Ads: 1, Exact: 1, Billable: 1}},
		{"repeated verdict is harmless", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 0))},
			[]Verdict{{ClickID: "k1", Fraud: true, DecidedAt: at(5, 0)}, {ClickID: "k1", Fraud: true, DecidedAt: at(5, 0), Offset: 1}},
			[]Row{{"a", 1, 0}}, DayStats{Ads: 1, Exact: 1, Fraud: 1}},
		{"tie on decided_at: fraud", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 0))},
			[]Verdict{{ClickID: "k1", Fraud: true, DecidedAt: at(5, 0)}, {ClickID: "k1", Fraud: false, DecidedAt: at(5, 0), Offset: 1}},
			[]Row{{"a", 1, 0}}, DayStats{Ads: 1, Exact: 1, Fraud: 1}},
		{"verdict on an unknown click is ignored", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "a", at(1, 0))},
			[]Verdict{{ClickID: "zz", Fraud: true, DecidedAt: at(5, 0)}},
			[]Row{{"a", 1, 1}}, DayStats{Ads: 1, Exact: 1, Billable: 1}},
		{"score above threshold is not billed, even with a valid verdict", Rules{FraudScoreThreshold: 0.8},
			[]clk{{"k1", "a", at(1, 0), 0.9}, {"k2", "a", at(1, 1), 0.95}, {"k3", "a", at(1, 2), 0.5}, {"k4", "a", at(1, 3), 0.8}},
			[]Verdict{{ClickID: "k2", Fraud: false, DecidedAt: at(5, 0)}},
			[]Row{{"a", 4, 2}}, DayStats{Ads: 1, Exact: 4, Billable: 2, Fraud: 2}},
		{"rows sorted by ad", Rules{FraudScoreThreshold: 1}, []clk{c("k1", "b", at(1, 0)), c("k2", "a", at(1, 0)), c("k3", "b", at(23, 59))}, nil,
			[]Row{{"a", 1, 1}, {"b", 2, 2}}, DayStats{Ads: 2, Exact: 3, Billable: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta := NewTally(testDay.Add(5*time.Hour), tt.rules, "")
			var cs []Click
			for i, k := range tt.clicks {
				cs = append(cs, Click{ClickID: k.id, AdID: k.ad, TS: k.ts, FraudScore: k.score, HasFraudScore: k.score > 0, Offset: int64(i)})
			}
			ta.AddClicks(cs)
			ta.AddVerdicts(tt.verdicts)
			rows, _, day := ta.Rows()
			if !slices.Equal(rows, tt.want) || day != tt.wantDay {
				t.Fatalf("got %+v %+v; want %+v %+v", rows, day, tt.want, tt.wantDay)
			}
		})
	}
}

// The same records in any order and batching give the same rows.
func TestTallyOrderIndependent(t *testing.T) {
	cs := []Click{
		{ClickID: "k1", AdID: "a", TS: at(1, 0), Partition: 1, Offset: 5},
		{ClickID: "k1", AdID: "b", TS: at(1, 0), Partition: 0, Offset: 9}, // same ms: the lower partition is first
		{ClickID: "k2", AdID: "a", TS: at(2, 0), Partition: 1, Offset: 6},
		{ClickID: "k2", AdID: "a", TS: at(2, 30), Partition: 1, Offset: 7},
	}
	vs := []Verdict{{ClickID: "k2", Fraud: true, DecidedAt: at(3, 0)}, {ClickID: "k2", Fraud: false, DecidedAt: at(4, 0)}}
	want := []Row{{"a", 1, 1}, {"b", 1, 1}}
	for _, perm := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}} {
		ta := NewTally(testDay, Rules{FraudScoreThreshold: 1}, "")
		for _, i := range perm {
			ta.AddClicks([]Click{cs[i]})
		}
		ta.AddVerdicts([]Verdict{vs[1]})
		ta.AddVerdicts([]Verdict{vs[0]})
		if got, _, _ := ta.Rows(); !slices.Equal(got, want) {
			t.Fatalf("order %v: got %+v; want %+v", perm, got, want)
		}
	}
}

// The breakdown groups each counted click under the campaign and the device of its first
// occurrence, the one it is counted under by ad: each grouping sums to the day's totals.
func TestTallyBreakdown(t *testing.T) {
	ta := NewTally(testDay, Rules{FraudScoreThreshold: 0.8}, "")
	ta.AddClicks([]Click{
		{ClickID: "k1", AdID: "a", CampaignID: "c1", Device: "mobile", TS: at(1, 0)},
		{ClickID: "k1", AdID: "a", CampaignID: "c2", Device: "desktop", TS: at(1, 5), Offset: 1}, // a repeat: its first decides
		{ClickID: "k2", AdID: "b", CampaignID: "c1", Device: "desktop", TS: at(2, 0), Offset: 2},
		{ClickID: "k3", AdID: "b", CampaignID: "c2", Device: "desktop", TS: at(3, 0), Offset: 3, FraudScore: 0.9, HasFraudScore: true},
		{ClickID: "k4", AdID: "c", TS: at(4, 0), Offset: 4},                                  // no campaign nor device
		{ClickID: "k5", AdID: "a", CampaignID: "c9", Device: "tv", TS: at(-1, 0), Offset: 5}, // yesterday's
	})
	ta.AddVerdicts([]Verdict{{ClickID: "k2", Fraud: true, DecidedAt: at(5, 0)}})
	_, by, day := ta.Rows()
	wantCampaigns := []Group{{"", 1, 1}, {"c1", 2, 1}, {"c2", 1, 0}}
	wantDevices := []Group{{"", 1, 1}, {"desktop", 2, 0}, {"mobile", 1, 1}}
	if !slices.Equal(by.Campaigns, wantCampaigns) || !slices.Equal(by.Devices, wantDevices) {
		t.Fatalf("got campaigns %+v, devices %+v; want %+v, %+v", by.Campaigns, by.Devices, wantCampaigns, wantDevices)
	}
	if day.Exact != 4 || day.Billable != 2 {
		t.Fatalf("got day %+v; want 4 exact, 2 billable (what each grouping sums to)", day)
	}
}

func TestTallyAudit(t *testing.T) {
	ta := NewTally(testDay, Rules{FraudScoreThreshold: 1}, "a")
	ta.AddClicks([]Click{
		{ClickID: "k0", AdID: "a", TS: at(-1, 0), Offset: 0}, // yesterday: not listed
		{ClickID: "k0", AdID: "a", TS: at(0, 5), Offset: 1},  // its repeat today
		{ClickID: "k1", AdID: "a", TS: at(1, 0), Offset: 2},  // counted
		{ClickID: "k1", AdID: "a", TS: at(1, 20), Offset: 3}, // repeat 20 minutes later
		{ClickID: "k2", AdID: "a", TS: at(2, 0), Offset: 4},  // fraud
		{ClickID: "k3", AdID: "b", TS: at(2, 0), Offset: 5},  // another ad: not listed
		{ClickID: "k3", AdID: "a", TS: at(3, 0), Offset: 6},  // same id, later, for a: duplicate of b's
		{ClickID: "k4", AdID: "a", TS: at(24, 0), Offset: 7}, // tomorrow: not listed
	})
	ta.AddVerdicts([]Verdict{{ClickID: "k2", Fraud: true, Reason: "bot", DecidedAt: at(6, 0)}})
	got := ta.Audit()
	type line struct {
		id     string
		status Status
	}
	var gotLines []line
	for _, l := range got {
		gotLines = append(gotLines, line{l.ClickID, l.Status})
	}
	want := []line{{"k0", StatusDuplicate}, {"k1", StatusCounted}, {"k1", StatusDuplicate}, {"k2", StatusFraud}, {"k3", StatusDuplicate}}
	if !slices.Equal(gotLines, want) {
		t.Fatalf("got %+v; want %+v", gotLines, want)
	}
	if got[3].Verdict != "fraud" || got[3].Reason != "bot" || got[4].Why == "" {
		t.Fatalf("got %+v and %+v; want the fraud verdict with its reason, and why k3 is a duplicate", got[3], got[4])
	}
}
