// Package fence is the validity rule of a partition's batches, derived from its claims alone: a
// batch of epoch e is valid unless a claim of a later epoch started before the batch's end. Such
// a batch was written by an owner that had lost the partition (a zombie: stalled past the
// session timeout, then finishing its write) after the new owner read the checkpoint; the new
// owner replays those records itself, so the zombie's batch is not part of the checkpoint and is
// undone. The rule reads only stored data, so every process, before and after crashes, agrees
// on it (docs/EXACTLY_ONCE.md).
//
// A stream's batch ends at one offset per topic it reads (views: end_offset; clicks:
// clicks_end and verdicts_end): a Fence names those columns, and a claim starts at one offset
// in each. A Fence is an immutable value, safe to share.
package fence

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Claim is one assignment of a partition: the epoch its owner writes under (the previous
// maximum + 1), where it resumed in each of the fence's columns, when it was made, and by whom
// (Table.Acquire sets it).
type Claim struct {
	Epoch uint64
	Start []int64
	At    time.Time
	Owner string
}

// ResumesAtStart reports whether the claim's owner must resume at its Start even where it found
// no checkpoint: whenever it is not the partition's first claim. Its start makes every earlier
// epoch's batch ending beyond it invalid, including batches that landed after its checkpoint
// read, whose owners may have committed their ends to Kafka since: resuming at Kafka's
// committed offset would leave the records below it counted by nobody. Only a first claim has
// no earlier batch to invalidate, and resumes where Kafka's committed offset (or the log's
// start) says.
func (c Claim) ResumesAtStart() bool { return c.Epoch > 1 }

// Fence is the rule over one partition's claims.
type Fence struct {
	columns []string
	claims  []Claim // ascending epoch
}

// New returns the fence of claims over the batches' end-offset columns.
func New(columns []string, claims []Claim) Fence {
	cs := slices.Clone(claims)
	slices.SortFunc(cs, func(a, b Claim) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return Fence{columns: columns, claims: cs}
}

// With is the fence with one more claim.
func (f Fence) With(c Claim) Fence { return New(f.columns, append(slices.Clone(f.claims), c)) }

// Claims are the claims, in ascending epoch.
func (f Fence) Claims() []Claim { return f.claims }

// Last is the newest claim, if any.
func (f Fence) Last() (Claim, bool) {
	if len(f.claims) == 0 {
		return Claim{}, false
	}
	return f.claims[len(f.claims)-1], true
}

// MaxEpoch is the newest claim's epoch, 0 when the partition was never claimed.
func (f Fence) MaxEpoch() uint64 {
	c, _ := f.Last()
	return c.Epoch
}

// epochs lists every epoch a batch may carry: 0 (batches from before claims existed) and each
// claim's.
func (f Fence) epochs() []uint64 {
	es := []uint64{0}
	for _, c := range f.claims {
		es = append(es, c.Epoch)
	}
	return es
}

// Lookback is where an owner looks for zombies' batches in the first column: the lowest start
// among the claims made since since (the claims a statement still running could have raced),
// and at most upTo.
func (f Fence) Lookback(since time.Time, upTo int64) int64 {
	for _, c := range f.claims {
		if !c.At.Before(since) && c.Start[0] < upTo {
			upTo = c.Start[0]
		}
	}
	return upTo
}

// bounds are the highest end offsets, per column, a valid batch of epoch e may have; ok is false
// when no later claim limits it.
func (f Fence) bounds(e uint64) (ends []int64, ok bool) {
	ends = make([]int64, len(f.columns))
	for i := range ends {
		ends[i] = math.MaxInt64
	}
	for _, c := range f.claims {
		if c.Epoch <= e {
			continue
		}
		ok = true
		for i, s := range c.Start {
			ends[i] = min(ends[i], s)
		}
	}
	return ends, ok
}

// Valid reports whether the batch of epoch e ending at end (one offset per column) is valid.
func (f Fence) Valid(e uint64, end ...int64) bool {
	b, ok := f.bounds(e)
	if !ok {
		return true
	}
	for i, x := range end {
		if x > b[i] {
			return false
		}
	}
	return true
}

// InvalidSQL is a condition over the columns epoch and the end offsets that holds for the
// invalid batches of the epochs the claims name (and 0).
func (f Fence) InvalidSQL() string {
	var terms []string
	for _, e := range f.epochs() {
		if b, ok := f.bounds(e); ok {
			terms = append(terms, fmt.Sprintf("(epoch = %d AND %s)", e, f.beyond(b)))
		}
	}
	return or(terms)
}

// AnyInvalidSQL is InvalidSQL over every epoch, not only the claims' own: a batch of an epoch
// no claim row names any more (the claims table lost rows) is judged by the claims that remain.
func (f Fence) AnyInvalidSQL() string {
	terms := make([]string, 0, len(f.claims))
	for _, c := range f.claims {
		terms = append(terms, fmt.Sprintf("(epoch < %d AND %s)", c.Epoch, f.beyond(c.Start)))
	}
	return or(terms)
}

// beyond is the condition that a batch ends after starts in some column.
func (f Fence) beyond(starts []int64) string {
	parts := make([]string, len(f.columns))
	for i, col := range f.columns {
		parts[i] = fmt.Sprintf("%s > %d", col, starts[i])
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

func or(terms []string) string {
	if len(terms) == 0 {
		return "0"
	}
	return strings.Join(terms, " OR ")
}
