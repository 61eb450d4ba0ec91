package views

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// claim is one assignment of a partition: the epoch its owner writes under (the previous
// maximum + 1), the deltas checkpoint it resumed from and when it was made.
type claim struct {
	epoch uint64
	start int64
	at    time.Time
}

// fence is the validity rule of a partition's batches, derived from its claims alone: a batch of
// epoch e is valid unless a claim of a later epoch started before the batch's end. Such a batch
// was written by an owner that had lost the partition (a zombie: stalled past the session
// timeout, then finishing its write) after the new owner read the checkpoint; the new owner
// replays those records itself, so the zombie's batch is not part of the checkpoint and is undone.
// The rule reads only stored data, so every process, before and after crashes, agrees on it.
type fence struct {
	claims []claim // ascending epoch
}

func newFence(claims []claim) fence {
	sort.Slice(claims, func(i, j int) bool { return claims[i].epoch < claims[j].epoch })
	return fence{claims: claims}
}

// maxEpoch is the newest claim's epoch, 0 when the partition was never claimed.
func (f fence) maxEpoch() uint64 {
	if len(f.claims) == 0 {
		return 0
	}
	return f.claims[len(f.claims)-1].epoch
}

// epochs lists every epoch a batch may carry: 0 (batches from before claims existed) and each
// claim's.
func (f fence) epochs() []uint64 {
	es := []uint64{0}
	for _, c := range f.claims {
		es = append(es, c.epoch)
	}
	return es
}

// lookback is where an owner looks for zombies' batches: the lowest start among the claims made
// since since (the claims a statement still running could have raced), and at most upTo.
func (f fence) lookback(since time.Time, upTo int64) int64 {
	for _, c := range f.claims {
		if !c.at.Before(since) && c.start < upTo {
			upTo = c.start
		}
	}
	return upTo
}

// bound is the highest end offset a valid batch of epoch e may have; ok is false when no later
// claim limits it.
func (f fence) bound(e uint64) (end int64, ok bool) {
	end = math.MaxInt64
	for _, c := range f.claims {
		if c.epoch > e && c.start < end {
			end, ok = c.start, true
		}
	}
	return end, ok
}

// valid reports whether the batch of epoch e ending at end is valid.
func (f fence) valid(e uint64, end int64) bool {
	b, ok := f.bound(e)
	return !ok || end <= b
}

// invalidSQL is a condition over the columns epoch and end_offset that holds for the invalid
// batches among epochs.
func (f fence) invalidSQL(epochs []uint64) string {
	var terms []string
	for _, e := range epochs {
		if b, ok := f.bound(e); ok {
			terms = append(terms, fmt.Sprintf("(epoch = %d AND end_offset > %d)", e, b))
		}
	}
	if len(terms) == 0 {
		return "0"
	}
	return strings.Join(terms, " OR ")
}

// anyInvalidSQL is invalidSQL over every epoch, not only the claims' own: a batch of an epoch no
// claim row names any more (partition_claims lost rows) is judged by the claims that remain.
func (f fence) anyInvalidSQL() string {
	var terms []string
	for _, c := range f.claims {
		terms = append(terms, fmt.Sprintf("(epoch < %d AND end_offset > %d)", c.epoch, c.start))
	}
	if len(terms) == 0 {
		return "0"
	}
	return strings.Join(terms, " OR ")
}
