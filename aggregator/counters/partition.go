// Package counters is the rule set of the generic counters in modes eventual and accurate
// (docs/API.md, "Generic counters"; docs/EXACTLY_ONCE.md, "Generic counters") on the partition
// engine: it turns the counter_events topic into exactly-once per-counter, per-minute sums in
// ClickHouse's counter_deltas. An add counts once per idempotency token within its namespace's
// window (the dedupe rule of package dedupe, one window per window length); a clear sets a
// counter to zero at its place in the log; a distinct member goes into the counter's hourly
// sketch (adding it again changes nothing); a record that does not decode is set aside in
// dead_letters.
//
// Each partition's state is its dedupe windows and the batch since the last flush. A flush
// writes the batch's dead letters and its counted tokens with the windows' watermarks (rows a
// replay writes again identically), then the deltas with the partition's checkpoint in one
// INSERT, through the claims fence. On assignment the checkpoint, the windows and the tokens are
// loaded back.
//
// The Aggregator is the stream's rule set (Claim, Apply, Write) on the engine it embeds. The
// engine calls it under its lock, from the consume loop and the group-rebalance callbacks; it
// owns no goroutines.
package counters

import (
	"maps"

	"github.com/tallypipeline/tally/aggregator/deadletter"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/dedupe"
)

// counterKey is one counter.
type counterKey struct {
	ns   string
	gen  uint64
	name string
}

// deltaKey is one counter's minute.
type deltaKey struct {
	counterKey
	minute int64 // Unix seconds, a multiple of 60
}

// cleared is a counter's last clear in the batch: its minute and its row's expiry. At the write
// the counter's durable total (durable) is taken back in that minute.
type cleared struct {
	minute, expires int64
}

// delta is a minute's sum in the batch, and when its row expires (Unix seconds).
type delta struct {
	sum     int64
	expires int64
}

// distinctMember is a member added to a counter's distinct members of an hour.
type distinctMember struct {
	counterKey
	hour, expires int64 // Unix seconds
	value         string
}

// token is a counted add's token, for the dedupe state.
type token struct {
	window int64
	key    uint64
	ts     int64
}

// partition is the state of one assigned partition.
type partition struct {
	id      int32
	epoch   uint64
	invalid string // the fence over the partition's claims up to this owner's (fence.AnyInvalidSQL)

	next    int64 // after the last processed record: the end of the pending batch
	flushed int64 // the checkpoint: the end of the last batch written
	records int

	windows map[int64]*dedupe.Window // by window length, ms
	deltas  map[deltaKey]*delta
	clears  map[counterKey]cleared
	// durable holds the totals up to the checkpoint of the counters the batch clears, read once
	// per batch (readDurable), so that a retried write takes back the same amounts.
	durable map[counterKey]int64
	tokens  []token
	members []distinctMember
	counted int
	poison  int
	dead    []deadletter.Letter
}

func newPartition(id int32) *partition {
	return &partition{id: id, windows: map[int64]*dedupe.Window{}, deltas: map[deltaKey]*delta{}, clears: map[counterKey]cleared{}}
}

// ID, Epoch and Batched are the partition as the engine reads it.
func (p *partition) ID() int32     { return p.id }
func (p *partition) Epoch() uint64 { return p.epoch }
func (p *partition) Batched() int  { return p.records }

func (p *partition) pending() bool { return p.next != p.flushed }

// window is the dedupe window of length ms, made at its first use.
func (p *partition) window(ms int64) *dedupe.Window {
	w := p.windows[ms]
	if w == nil {
		w = dedupe.New(ms, schemas.CounterGrace)
		p.windows[ms] = w
	}
	return w
}

// apply applies the record at offset: one that does not decode is set aside; an add whose token
// was counted within its window changes nothing.
func (p *partition) apply(offset int64, key, value []byte) {
	p.next = offset + 1
	p.records++
	e, err := schemas.DecodeCounterEvent(value)
	if err != nil {
		p.poison++
		p.dead = append(p.dead, deadletter.OfRecord(schemas.TopicCounterEvents, p.id, offset, key, value, err))
		return
	}
	ck := counterKey{e.Namespace, e.Generation, e.Name}
	if e.Op == schemas.CounterDistinct {
		// A member added twice is added once: no token, no dedupe state.
		hour := schemas.FloorDiv(e.TS, 3_600_000) * 3600
		p.counted++
		p.members = append(p.members, distinctMember{ck, hour, hour + e.Retention, e.Member})
		return
	}
	k := e.DedupeKey()
	if !p.window(e.Window).Observe(k, e.TS) {
		return
	}
	p.counted++
	p.tokens = append(p.tokens, token{window: e.Window, key: k, ts: e.TS})
	minute := schemas.FloorDiv(e.TS, 60_000) * 60
	if e.Op == schemas.CounterClear {
		// The batch's adds before it no longer count; the durable total is taken back at the
		// write, in the clear's minute.
		maps.DeleteFunc(p.deltas, func(k deltaKey, _ *delta) bool { return k.counterKey == ck })
		p.clears[ck] = cleared{minute: minute, expires: minute + e.Retention}
		return
	}
	dk := deltaKey{ck, minute}
	d := p.deltas[dk]
	if d == nil {
		d = &delta{}
		p.deltas[dk] = d
	}
	d.sum += e.Delta
	d.expires = max(d.expires, minute+e.Retention)
}

// markFlushed resets the batch after it was written up to p.next.
func (p *partition) markFlushed() {
	p.flushed = p.next
	clear(p.deltas)
	clear(p.clears)
	p.durable = nil
	p.tokens = p.tokens[:0]
	p.members = p.members[:0]
	p.records, p.counted, p.poison = 0, 0, 0
	p.dead = nil
}
