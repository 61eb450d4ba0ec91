package views

import "github.com/tallypipeline/tally/schemas/viewerhours"

// Unique viewers per hour (migration 022): each view sets a register of its item's sketch of
// the view's hour, held per partition until the next sketch write sends the registers set
// since the last one. ClickHouse merges them into the hour's sketch, so nothing is loaded or
// folded here, and a write given back after a failure is merged into what came since.

type hourKey struct {
	item string
	hour int32 // hours since the Unix epoch
}

// addHour sets the register of the viewer with hash h in item's sketch of hour.
func (p *partition) addHour(item string, hour int32, h uint64) {
	k := hourKey{item, hour}
	r := p.hours[k]
	if r == nil {
		r = new(viewerhours.Registers)
		p.hours[k] = r
	}
	r.Add(h)
}

// takeHours hands over the registers set since the last write; the views after set new ones.
func (p *partition) takeHours() map[hourKey]*viewerhours.Registers {
	taken := p.hours
	p.hours = make(map[hourKey]*viewerhours.Registers, len(taken))
	return taken
}

// restoreHours gives back registers a failed write took, merged into those set since.
func (p *partition) restoreHours(taken map[hourKey]*viewerhours.Registers) {
	for k, r := range taken {
		if cur := p.hours[k]; cur != nil {
			cur.Merge(r)
			continue
		}
		p.hours[k] = r
	}
}
