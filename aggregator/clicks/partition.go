// Package clicks turns the clicks and fraud_verdicts topics into exactly-once provisional click
// counts per ad, campaign and device and event-time minute in ClickHouse: count (after dedupe of click ids) and
// billable_count (minus clicks a fraud verdict condemns, and clicks whose fraud_score is over
// the configured threshold), with late verdicts correcting the minute their click was counted
// in, and hour rollups recomputed from the minutes (design and proof: docs/EXACTLY_ONCE.md,
// "Clicks"). A click or verdict record that does not decode or validate is set aside: it
// advances its topic's offset, changes no count, and becomes a row of dead_letters (package
// deadletter), logged and counted.
//
// The two topics are co-partitioned (a verdict is keyed by its click's ad), and one owner holds
// partition p of both. Each partition's state is its dedupe window, the batch since the last
// flush and a cache of recent verdicts. A flush writes, per partition, the dead letters of the
// batch's refused records and its counted clicks and verdicts (rows and facts a replay writes
// again identically), then the (ad, campaign, device, minute) deltas with the partition's checkpoint (both end
// offsets) in one INSERT, then, every rollup interval, the full values of the touched hours. On
// assignment the checkpoint, the dedupe window and the verdict cache are loaded back, and hours
// the last owner may not have rolled up are recomputed.
//
// The Aggregator is the stream's rule set (Claim, Apply, Write) on the partition engine it embeds
// (package engine), which owns the lifecycle. Concurrency: the engine calls the rule set under
// its lock, from the consume loop and the group-rebalance callbacks. The Aggregator owns no
// goroutines.
package clicks

import (
	"math"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/dedupe"
)

// group is what a click counts under: its ad, its campaign and its device. Clicks counted
// before the groups were kept have an empty campaign and device.
type group struct {
	ad, campaign, device string
}

type minuteKey struct {
	group
	minute int64 // Unix seconds, a multiple of 60
}

type hourKey struct {
	group
	hour int64 // Unix seconds, a multiple of 3600
}

type delta struct {
	clicks, billable int64
}

// counted is one click counted in the pending batch, and whether it is counted billable now.
type counted struct {
	group
	id        string
	ts        int64
	offset    int64 // in the clicks topic: identical clicks (a repeat past the hold) are two rows
	scoreOver bool
	billable  bool
}

// verdictState is the latest verdict known for a click id; held is the partition's click
// watermark when it was resolved (it is dropped from the cache a hold after).
type verdictState struct {
	verdict schemas.Verdict
	decided int64
	held    int64
}

// newer reports whether v replaces cur: a later decision wins, and fraud wins a tie, so the
// outcome does not depend on the order verdicts are read in.
func newer(v verdictState, cur verdictState, have bool) bool {
	if !have {
		return true
	}
	if v.decided != cur.decided {
		return v.decided > cur.decided
	}
	return v.verdict == schemas.VerdictFraud && cur.verdict != schemas.VerdictFraud
}

// billable is whether a counted click is billable under verdict state v.
func billable(scoreOver bool, v verdictState, have bool) bool {
	return !scoreOver && !(have && v.verdict == schemas.VerdictFraud)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// offsets names a point in both topics of a partition: the batch identity and the checkpoint.
type offsets struct {
	clicks, verdicts int64
}

// partition is the state of one assigned partition of both topics.
type partition struct {
	id        int32
	win       *dedupe.Window
	threshold float64
	hold      int64 // ms: how long a verdict stays in the cache, in click event time

	next    offsets // after the last processed records: end of the pending batch
	flushed offsets // checkpoint: end of the last batch written
	rolled  offsets // hour rollups are complete up to here
	records int

	deltas   map[minuteKey]*delta
	counted  []counted
	byID     map[string][]int // indexes into counted
	verdicts []schemas.FraudVerdict
	// resolved counts the verdicts of the batch already resolved, and resolvedIDs their click
	// ids, so that a flush retried after a failure resolves each verdict once.
	resolved    int
	resolvedIDs map[string]bool
	latest      map[string]verdictState // cache of recent verdicts, by click id
	dirty       map[hourKey]struct{}    // hours touched since the last rollup
	poison      int
	// dead holds the letters of the batch's refused records until the flush writes them.
	dead []deadletter.Letter

	// countedEnd is the clicks checkpoint up to which the counted topic is known to hold every
	// batch (-1: unknown).
	countedEnd int64

	epoch uint64
	// invalid is the fence over the partition's claims up to this owner's (fence.AnyInvalidSQL).
	invalid string
}

func newPartition(id int32, window, grace, hold int64, threshold float64) *partition {
	return &partition{
		id: id, win: dedupe.New(window, grace), threshold: threshold, hold: max(hold, window+grace), countedEnd: -1,
		deltas: map[minuteKey]*delta{}, byID: map[string][]int{}, latest: map[string]verdictState{}, resolvedIDs: map[string]bool{}, dirty: map[hourKey]struct{}{},
	}
}

func (p *partition) delta(g group, ts int64) *delta {
	k := minuteKey{g, schemas.FloorDiv(ts, 60_000) * 60}
	d := p.deltas[k]
	if d == nil {
		d = &delta{}
		p.deltas[k] = d
	}
	return d
}

// setAside notes that the record at offset of topic is refused for err. The decision depends on
// the record's bytes alone, so every replay refuses it the same way and writes the same letter.
func (p *partition) setAside(topic string, offset int64, key, value []byte, err error) {
	p.poison++
	p.dead = append(p.dead, deadletter.OfRecord(topic, p.id, offset, key, value, err))
}

// click applies the click record at offset: a record that does not decode or validate is set
// aside (it changes no state).
func (p *partition) click(offset int64, key, value []byte) {
	p.next.clicks = offset + 1
	p.records++
	c, err := schemas.DecodeClick(value)
	if err != nil {
		p.setAside(schemas.TopicClicks, offset, key, value, err)
		return
	}
	if !p.win.Observe(dedupe.Key(c.ClickID, c.AdID), c.TS) {
		return
	}
	over := c.HasFraudScore && c.FraudScore > p.threshold
	v, have := p.latest[c.ClickID]
	b := billable(over, v, have)
	g := group{c.AdID, c.CampaignID, c.Device}
	d := p.delta(g, c.TS)
	d.clicks++
	d.billable += b2i(b)
	p.byID[c.ClickID] = append(p.byID[c.ClickID], len(p.counted))
	p.counted = append(p.counted, counted{group: g, id: c.ClickID, ts: c.TS, offset: offset, scoreOver: over, billable: b})
}

// verdict queues the verdict record at offset; verdicts are resolved at flush (resolve), when the
// clicks counted in earlier batches can be looked up. A record that does not decode or validate
// is set aside.
func (p *partition) verdict(offset int64, key, value []byte) {
	p.next.verdicts = offset + 1
	p.records++
	v, err := schemas.DecodeFraudVerdict(value)
	if err != nil {
		p.setAside(schemas.TopicFraudVerdicts, offset, key, value, err)
		return
	}
	p.verdicts = append(p.verdicts, v)
}

// storedClick is a click counted in an earlier batch, as clicks_counted holds it.
type storedClick struct {
	group
	ts        int64
	scoreOver bool
}

// resolve applies the pending batch's verdicts. before holds, for each click id of those
// verdicts, the latest verdict of the batches up to the checkpoint, and stored the clicks those
// batches counted with the id: their contribution changes from what before made it to what the
// latest verdict makes it. Clicks of the pending batch change from what they were counted as.
// Every verdict thus meets every counted click of its id, whichever was read first.
func (p *partition) resolve(before map[string]verdictState, stored map[string][]storedClick) {
	for id := range p.resolvedIDs {
		// Resolved earlier in this batch: the cache holds what the counted clicks are now.
		if v, ok := p.latest[id]; ok {
			before[id] = v
		}
	}
	final := map[string]verdictState{}
	for _, v := range p.verdicts[p.resolved:] {
		s := verdictState{verdict: v.Verdict, decided: v.DecidedAt}
		cur, have := final[v.ClickID]
		if !have {
			cur, have = before[v.ClickID]
		}
		if newer(s, cur, have) {
			final[v.ClickID] = s
		} else if have {
			final[v.ClickID] = cur
		}
	}
	wm := p.win.Watermark()
	for id, f := range final {
		prev, had := before[id]
		for _, c := range stored[id] {
			if d := b2i(billable(c.scoreOver, f, true)) - b2i(billable(c.scoreOver, prev, had)); d != 0 {
				p.delta(c.group, c.ts).billable += d
			}
		}
		for _, i := range p.byID[id] {
			c := &p.counted[i]
			nb := billable(c.scoreOver, f, true)
			if d := b2i(nb) - b2i(c.billable); d != 0 {
				p.delta(c.group, c.ts).billable += d
			}
			c.billable = nb
		}
		f.held = wm
		p.latest[id] = f
		p.resolvedIDs[id] = true
	}
	p.resolved = len(p.verdicts)
}

// verdictIDs lists the click ids of the pending verdicts, once each.
func (p *partition) verdictIDs() []string {
	seen := map[string]bool{}
	var ids []string
	for _, v := range p.verdicts[p.resolved:] {
		if !seen[v.ClickID] {
			seen[v.ClickID] = true
			ids = append(ids, v.ClickID)
		}
	}
	return ids
}

func (p *partition) pending() bool { return p.next != p.flushed }

// ID, Epoch and Batched are the partition as the engine reads it.
func (p *partition) ID() int32     { return p.id }
func (p *partition) Epoch() uint64 { return p.epoch }
func (p *partition) Batched() int  { return p.records }

// markFlushed resets the batch after it was written up to p.next, noting the hours it touched
// and forgetting verdicts held longer than the hold.
func (p *partition) markFlushed() {
	p.flushed = p.next
	for k := range p.deltas {
		p.dirty[hourKey{k.group, k.minute - k.minute%3600}] = struct{}{}
	}
	clear(p.deltas)
	clear(p.byID)
	p.counted = p.counted[:0]
	p.verdicts = p.verdicts[:0]
	p.resolved = 0
	clear(p.resolvedIDs)
	p.records, p.poison = 0, 0
	wm := p.win.Watermark()
	if wm < math.MinInt64+p.hold {
		return // no click seen yet
	}
	cutoff := wm - p.hold
	for id, v := range p.latest {
		if v.held < cutoff {
			delete(p.latest, id)
		}
	}
}
