package likestate

import "sync"

// maxHandledPerPartition bounds the offsets remembered for one partition. The applier of a
// partition forgets them on every batch, so only a partition this process's applier does not
// own fills up; it is then cleared, which only means the applier applies those records itself.
const maxHandledPerPartition = 16384

// handled remembers the log offsets whose changes this process's requests applied to Redis
// themselves. The applier reads every record again (to repair a change that reached only the
// log) and skips these instead of sending each change to Redis a second time. Forgetting an
// offset is always safe: applying a record again changes nothing. Safe for concurrent use.
type handled struct {
	mu    sync.Mutex
	parts map[int32]map[int64]struct{}
}

func newHandled() *handled { return &handled{parts: map[int32]map[int64]struct{}{}} }

// add records that the change at (partition, offset) is in Redis.
func (h *handled) add(partition int32, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.parts[partition]
	if m == nil || len(m) >= maxHandledPerPartition {
		m = make(map[int64]struct{})
		h.parts[partition] = m
	}
	m[offset] = struct{}{}
}

// unapplied filters recs (in place) down to the records no request of this process applied,
// and forgets every offset up to the last one of each partition in recs: the applier reads in
// order, so it will not ask about them again, and a request applying one of them later has
// nothing left to skip.
func (h *handled) unapplied(recs []Record) []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	last := map[int32]int64{}
	out := recs[:0]
	for _, r := range recs {
		if _, ok := h.parts[r.Partition][r.Offset]; !ok {
			out = append(out, r)
		}
		if l, ok := last[r.Partition]; !ok || r.Offset > l {
			last[r.Partition] = r.Offset
		}
	}
	for p, l := range last {
		for off := range h.parts[p] {
			if off <= l {
				delete(h.parts[p], off)
			}
		}
	}
	return out
}
