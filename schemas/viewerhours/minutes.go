package viewerhours

import (
	"cmp"
	"slices"
)

// MinutesPerHour is how many minutes an hour's sketch keeps registers for.
const MinutesPerHour = 60

// MinuteKey is how a minute's register is stored in an hour's row (the column minutes of
// migration 023): the minute of the hour above the register's Precision bits, so that one
// maxMap per (item, hour) keeps all its minutes.
func MinuteKey(minute int, reg uint16) uint32 { return uint32(minute)<<Precision | uint32(reg) }

// SplitKey is the minute of the hour and the register of a stored minute key; ok is false for
// a key no MinuteKey makes (stored rows are outside input).
func SplitKey(k uint32) (minute int, reg uint16, ok bool) {
	minute = int(k >> Precision)
	return minute, uint16(k & (Count - 1)), minute < MinutesPerHour
}

// Hour is the registers an item's views set within one hour, minute by minute; the hour's are
// their union. The views of one sketch interval fall in one minute or two, so the first minute
// is held inline. An Hour is not safe for concurrent use.
type Hour struct {
	first minute
	rest  []minute
	used  bool // first holds a minute
}

type minute struct {
	of   uint8 // minute of the hour
	regs Registers
}

// Add sets the register of the viewer with hash h in the sketch of the hour's minute m (0..59).
func (hr *Hour) Add(m int, h uint64) { hr.minute(m).Set(Register(h)) }

// minute returns the registers of minute m, added empty if absent.
func (hr *Hour) minute(m int) *Registers {
	if !hr.used {
		hr.first, hr.used = minute{of: uint8(m)}, true
		return &hr.first.regs
	}
	if hr.first.of == uint8(m) {
		return &hr.first.regs
	}
	for i := range hr.rest {
		if hr.rest[i].of == uint8(m) {
			return &hr.rest[i].regs
		}
	}
	hr.rest = append(hr.rest, minute{of: uint8(m)})
	return &hr.rest[len(hr.rest)-1].regs
}

// Merge sets hr to the union of hr and o, minute by minute.
func (hr *Hour) Merge(o *Hour) {
	o.each(func(m *minute) { hr.minute(int(m.of)).Merge(&m.regs) })
}

// each calls fn with every minute held.
func (hr *Hour) each(fn func(m *minute)) {
	if !hr.used {
		return
	}
	fn(&hr.first)
	for i := range hr.rest {
		fn(&hr.rest[i])
	}
}

// Pairs returns the hour's registers (the union of its minutes') and their ranks, by register,
// and every minute's registers as stored keys (MinuteKey) and their ranks, by key: the two
// columns of the hour's row.
func (hr *Hour) Pairs() (regs []uint16, ranks []uint8, keys []uint32, minuteRanks []uint8) {
	if len(hr.rest) == 0 { // one minute: the hour's registers are its
		regs, ranks = hr.first.regs.Pairs()
		keys = make([]uint32, len(regs))
		for i, reg := range regs {
			keys[i] = MinuteKey(int(hr.first.of), reg)
		}
		return regs, ranks, keys, ranks
	}
	var all Registers
	ms := make([]*minute, 0, 1+len(hr.rest))
	hr.each(func(m *minute) { all.Merge(&m.regs); ms = append(ms, m) })
	slices.SortFunc(ms, func(a, b *minute) int { return cmp.Compare(a.of, b.of) })
	for _, m := range ms {
		mregs, mranks := m.regs.Pairs()
		for i, reg := range mregs {
			keys, minuteRanks = append(keys, MinuteKey(int(m.of), reg)), append(minuteRanks, mranks[i])
		}
	}
	regs, ranks = all.Pairs()
	return regs, ranks, keys, minuteRanks
}
