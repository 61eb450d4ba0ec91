package views

import (
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/schemas/viewerhours"
)

// Unique viewers per hour and minute (migrations 022, 023): each view sets a register of its
// item's sketch of the view's minute, held per partition and (item, hour) until the next sketch
// write sends the registers set since the last one: the hour's and, in the same row, each
// minute's. ClickHouse merges them into the hour's and the minutes' sketches, so nothing is
// loaded or folded here, and a write given back after a failure is merged into what came since.

type hourKey struct {
	item string
	hour int32 // hours since the Unix epoch
}

// addMinute sets the register of the viewer with hash h in item's sketch of the minute of ts
// (Unix milliseconds).
func (p *partition) addMinute(item string, ts int64, h uint64) {
	minute := schemas.FloorDiv(ts, 60_000)
	k := hourKey{item, int32(schemas.FloorDiv(minute, 60))}
	r := p.hours[k]
	if r == nil {
		r = new(viewerhours.Hour)
		p.hours[k] = r
	}
	r.Add(int(minute-int64(k.hour)*60), h)
}

// takeHours hands over the registers set since the last write; the views after set new ones.
func (p *partition) takeHours() map[hourKey]*viewerhours.Hour {
	taken := p.hours
	p.hours = make(map[hourKey]*viewerhours.Hour, len(taken))
	return taken
}

// restoreHours gives back registers a failed write took, merged into those set since.
func (p *partition) restoreHours(taken map[hourKey]*viewerhours.Hour) {
	for k, r := range taken {
		if cur := p.hours[k]; cur != nil {
			cur.Merge(r)
			continue
		}
		p.hours[k] = r
	}
}
