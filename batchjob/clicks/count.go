package clicks

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Rules say how a day's clicks become counts: the streaming path's rule, so that the two
// numbers differ only by what the stream cannot know (repeats beyond its window, verdicts after
// its flush).
type Rules struct {
	// FraudScoreThreshold: a click whose fraud_score is above it is counted but not billable,
	// whatever verdict it gets (clicks.fraud_score_threshold; 1 disables, as no score exceeds 1).
	FraudScoreThreshold float64
}

// occurrence is where one occurrence of a click id sits: its event time, then its place in the
// log. The first occurrence is the least in this order.
type occurrence struct {
	ts        int64
	partition int32
	offset    int64
}

func (a occurrence) before(b occurrence) bool {
	if a.ts != b.ts {
		return a.ts < b.ts
	}
	if a.partition != b.partition {
		return a.partition < b.partition
	}
	return a.offset < b.offset
}

// first is a click id's first occurrence so far and what the run needs of it. It holds no
// pointers and sits in the map by value, so a day of click ids costs the collector nothing to
// scan beyond the keys.
type first struct {
	occurrence
	place    uint32 // index into tally.places
	onDay    uint32 // occurrences stamped on the day (the first included, if it is on the day)
	score    float64
	hasScore bool
}

// verdictState is the verdict that wins for a click: the latest decided_at; on a tie, fraud
// (billing must not rest on a doubt), then the later place in the log, so the same records give
// the same answer whatever order they are read in.
type verdictState struct {
	fraud     bool
	decidedAt int64
	reason    string
	partition int32
	offset    int64
}

func (a verdictState) wins(b verdictState) bool {
	if a.decidedAt != b.decidedAt {
		return a.decidedAt > b.decidedAt
	}
	if a.fraud != b.fraud {
		return a.fraud
	}
	if a.partition != b.partition {
		return a.partition > b.partition
	}
	return a.offset > b.offset
}

// Tally holds one run's state: the first occurrence of every click id read and the verdict on
// it. Feed it every click first, then the verdicts, then read Rows. A Tally is used by one
// goroutine.
type Tally struct {
	day, next int64 // the day's bounds, Unix ms
	rules     Rules
	clicks    map[string]first
	verdicts  map[string]verdictState // the winning verdict of held clicks that have one
	// places are the distinct (ad, campaign, device) of the clicks held: a click's first
	// occurrence decides which it counts under in each of the report's groupings. They are
	// found through the ad (one string lookup; an ad has few campaigns and devices).
	places   []place
	ads      []string
	adIndex  map[string]uint32
	adPlaces [][]uint32 // by ad index: its places

	audit      string  // the ad whose occurrences are kept (Audit), "" for none
	auditClick []Click // the audited ad's occurrences, in the order read
	stats      TallyStats
}

// TallyStats counts what a Tally saw.
type TallyStats struct {
	Clicks          int64 // click records passed in
	VerdictsRead    int64 // verdict records passed in
	VerdictsApplied int64 // of those, on a click the run holds
}

// NewTally returns a tally of day (any time in the UTC day) under rules. audit, when not "",
// keeps every occurrence of that ad for Audit.
func NewTally(day time.Time, rules Rules, audit string) *Tally {
	d := DayOf(day)
	return &Tally{day: d.UnixMilli(), next: d.AddDate(0, 0, 1).UnixMilli(), rules: rules,
		clicks: map[string]first{}, verdicts: map[string]verdictState{}, adIndex: map[string]uint32{}, audit: audit}
}

// DayOf returns the UTC midnight that opens t's day.
func DayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// AddClicks records clicks; the caller passes the day's clicks and those of the lookback before
// it (to recognize a repeat of an earlier day's click), never later ones.
func (t *Tally) AddClicks(cs []Click) {
	for i := range cs {
		c := &cs[i]
		t.stats.Clicks++
		if t.audit != "" && c.AdID == t.audit {
			t.auditClick = append(t.auditClick, *c)
		}
		o := occurrence{c.TS, c.Partition, c.Offset}
		f, seen := t.clicks[c.ClickID]
		if !seen {
			f = first{occurrence: o, place: t.placeOf(c), score: c.FraudScore, hasScore: c.HasFraudScore}
		} else if o.before(f.occurrence) {
			f.occurrence, f.place, f.score, f.hasScore = o, t.placeOf(c), c.FraudScore, c.HasFraudScore
		}
		if c.TS >= t.day && c.TS < t.next {
			f.onDay++
		}
		id := c.ClickID
		if !seen {
			// A decoded record's strings share one allocation: a key of its own keeps the rest
			// of the record collectable.
			id = strings.Clone(id)
		}
		t.clicks[id] = f
	}
}

// place is what a click was shown under, as the report groups clicks: its ad (index into
// Tally.ads), its campaign and the device it came from.
type place struct {
	ad               uint32
	campaign, device string
}

func (t *Tally) placeOf(c *Click) uint32 {
	ad, ok := t.adIndex[c.AdID]
	if !ok {
		ad = uint32(len(t.ads))
		id := strings.Clone(c.AdID)
		t.ads = append(t.ads, id)
		t.adIndex[id] = ad
		t.adPlaces = append(t.adPlaces, nil)
	}
	for _, i := range t.adPlaces[ad] {
		if p := &t.places[i]; p.campaign == c.CampaignID && p.device == c.Device {
			return i
		}
	}
	i := uint32(len(t.places))
	t.places = append(t.places, place{ad, strings.Clone(c.CampaignID), strings.Clone(c.Device)})
	t.adPlaces[ad] = append(t.adPlaces[ad], i)
	return i
}

// AddVerdicts applies verdicts to the clicks held; verdicts on other clicks are ignored.
func (t *Tally) AddVerdicts(vs []Verdict) {
	for i := range vs {
		v := &vs[i]
		t.stats.VerdictsRead++
		if _, held := t.clicks[v.ClickID]; !held {
			continue
		}
		t.stats.VerdictsApplied++
		s := verdictState{fraud: v.Fraud, decidedAt: v.DecidedAt, reason: v.Reason, partition: v.Partition, offset: v.Offset}
		if cur, ok := t.verdicts[v.ClickID]; !ok || s.wins(cur) {
			t.verdicts[v.ClickID] = s
		}
	}
}

// Stats says what the tally saw.
func (t *Tally) Stats() TallyStats { return t.stats }

// billable says whether a counted click is billed, and why not: not when its score is above
// the threshold, nor when its latest verdict is fraud.
func (t *Tally) billable(id string, f first) (bool, string) {
	if f.hasScore && f.score > t.rules.FraudScoreThreshold {
		return false, fmt.Sprintf("fraud_score %g above the threshold %g", f.score, t.rules.FraudScoreThreshold)
	}
	if v, ok := t.verdicts[id]; ok {
		if v.fraud {
			return false, "fraud verdict"
		}
		return true, "valid verdict"
	}
	return true, ""
}

// Row is one ad's exact numbers for the day.
type Row struct {
	AdID          string
	ExactCount    uint64 // distinct click ids whose first occurrence is on the day, for this ad
	BillableCount uint64 // of those, the ones billed
}

// Group is the day's exact numbers of one campaign or one device: the clicks whose first
// occurrence carried it.
type Group struct {
	Value         string
	ExactCount    uint64
	BillableCount uint64
}

// Breakdown is the day's numbers by campaign and by device; each list sums to the day's.
type Breakdown struct {
	Campaigns []Group
	Devices   []Group
}

// DayStats sums a day's rows and what was left out of them.
type DayStats struct {
	Ads        uint64
	Exact      uint64
	Billable   uint64
	Duplicates uint64 // occurrences on the day that were repeats of a counted or earlier click
	Fraud      uint64 // counted clicks not billed
}

// Rows returns the day's rows sorted by ad id, its breakdown sorted by campaign and by device,
// and their sums.
func (t *Tally) Rows() ([]Row, Breakdown, DayStats) {
	exact := make([]uint64, len(t.places))
	billable := make([]uint64, len(t.places))
	var st DayStats
	for id, f := range t.clicks {
		if f.ts < t.day || f.ts >= t.next {
			continue
		}
		exact[f.place]++
		st.Exact++
		if ok, _ := t.billable(id, f); ok {
			billable[f.place]++
			st.Billable++
		} else {
			st.Fraud++
		}
	}
	// A duplicate is an occurrence on the day that is not a click's first: a repeat of a click
	// counted on the day, or of one counted the day before.
	for _, f := range t.clicks {
		st.Duplicates += uint64(f.onDay)
		if f.ts >= t.day {
			st.Duplicates--
		}
	}
	var rows []Row
	for ad, ps := range t.adPlaces {
		r := Row{AdID: t.ads[ad]}
		for _, i := range ps {
			r.ExactCount += exact[i]
			r.BillableCount += billable[i]
		}
		if r.ExactCount > 0 {
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].AdID < rows[j].AdID })
	st.Ads = uint64(len(rows))
	return rows, Breakdown{
		Campaigns: t.group(exact, billable, func(p place) string { return p.campaign }),
		Devices:   t.group(exact, billable, func(p place) string { return p.device }),
	}, st
}

// group sums the places' counts by what key says of each, leaving out groups with no click on
// the day, sorted by value.
func (t *Tally) group(exact, billable []uint64, key func(place) string) []Group {
	at := map[string]int{}
	var out []Group
	for i, p := range t.places {
		if exact[i] == 0 {
			continue
		}
		k := key(p)
		j, ok := at[k]
		if !ok {
			j = len(out)
			at[k] = j
			out = append(out, Group{Value: k})
		}
		out[j].ExactCount += exact[i]
		out[j].BillableCount += billable[i]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// Status is what became of one occurrence of a click in the day's count.
type Status string

const (
	StatusCounted   Status = "counted"   // counted and billed
	StatusFraud     Status = "fraud"     // counted, not billed (verdict or score)
	StatusDuplicate Status = "duplicate" // a repeat of an earlier occurrence: not counted again
)

// AuditLine is one occurrence of the audited ad's clicks on the day.
type AuditLine struct {
	ClickID   string
	TS        int64
	Partition int32
	Offset    int64
	Status    Status
	// Why explains the status: the verdict or score behind "fraud", or the first occurrence a
	// duplicate repeats (its time, and its ad when another).
	Why       string
	Verdict   string // "fraud", "valid" or "" (none arrived)
	Reason    string // the verdict's reason
	DecidedAt int64  // the verdict's time, Unix ms; 0 without one
}

// Audit lists every occurrence of the audited ad's clicks stamped on the day, in event-time
// order, with what became of it: the counted and fraud lines of it add up to the ad's row.
func (t *Tally) Audit() []AuditLine {
	var out []AuditLine
	for _, c := range t.auditClick {
		if c.TS < t.day || c.TS >= t.next {
			continue
		}
		f := t.clicks[c.ClickID]
		l := AuditLine{ClickID: c.ClickID, TS: c.TS, Partition: c.Partition, Offset: c.Offset}
		if v, ok := t.verdicts[c.ClickID]; ok {
			l.Verdict, l.Reason, l.DecidedAt = "valid", v.reason, v.decidedAt
			if v.fraud {
				l.Verdict = "fraud"
			}
		}
		switch {
		case f.occurrence != (occurrence{c.TS, c.Partition, c.Offset}):
			l.Status = StatusDuplicate
			l.Why = "repeat of the click at " + time.UnixMilli(f.ts).UTC().Format(time.RFC3339Nano)
			if ad := t.ads[t.places[f.place].ad]; ad != c.AdID {
				l.Why += " for ad " + ad
			}
		default:
			ok, why := t.billable(c.ClickID, f)
			l.Status, l.Why = StatusCounted, why
			if !ok {
				l.Status = StatusFraud
			}
		}
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool {
		return occurrence{out[i].TS, out[i].Partition, out[i].Offset}.before(occurrence{out[j].TS, out[j].Partition, out[j].Offset})
	})
	return out
}
