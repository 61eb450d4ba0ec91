package counters

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/schemas"
)

// The tail of an accurate read is folded as the aggregators count the log: a token counts once
// within its window (earlier in the tail, or before the checkpoint), a clear takes back the
// total before it in its own minute.
func TestTailFold(t *testing.T) {
	const hour = 3_600_000
	ev := func(op, token string, delta, ts int64) schemas.CounterEvent {
		return schemas.CounterEvent{Op: op, Namespace: "n", Generation: 1, Name: "c", Delta: delta, Token: token, TS: ts, Window: hour, Retention: 86400}
	}
	before := func(e schemas.CounterEvent, ts int64) map[uint64][]int64 {
		return map[uint64][]int64{e.DedupeKey(): {ts}}
	}
	for _, c := range []struct {
		name    string
		durable int64
		evs     []schemas.CounterEvent
		before  map[uint64][]int64
		total   int64
		minutes map[int64]int64
	}{
		{"adds", 10, []schemas.CounterEvent{ev("add", "a", 2, 60_000), ev("", "b", -1, 120_000)}, nil, 11, map[int64]int64{60: 2, 120: -1}},
		{"a retry in the tail", 0, []schemas.CounterEvent{ev("add", "a", 2, 0), ev("add", "a", 2, 1000)}, nil, 2, map[int64]int64{0: 2}},
		{"a retry a window later", 0, []schemas.CounterEvent{ev("add", "a", 2, 0), ev("add", "a", 2, hour)}, nil, 4, map[int64]int64{0: 2, 3600: 2}},
		{"a token counted before the checkpoint", 5, []schemas.CounterEvent{ev("add", "a", 2, 0)}, before(ev("add", "a", 2, 0), 30_000), 5, map[int64]int64{}},
		{"a token counted a window before", 5, []schemas.CounterEvent{ev("add", "a", 2, hour)}, before(ev("add", "a", 2, 0), 0), 7, map[int64]int64{3600: 2}},
		{"a clear", 10, []schemas.CounterEvent{ev("add", "a", 2, 0), ev("clear", "c", 0, 60_000), ev("add", "b", 3, 60_000)}, nil, 3, map[int64]int64{0: 2, 60: -9}},
		{"a clear retried", 10, []schemas.CounterEvent{ev("clear", "c", 0, 0), ev("add", "b", 3, 0), ev("clear", "c", 0, 0)}, nil, 3, map[int64]int64{0: -7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			total, minutes := fold(c.durable, counted(c.evs, c.before))
			if total != c.total || fmt.Sprint(minutes) != fmt.Sprint(c.minutes) {
				t.Errorf("got %d, minutes %v; want %d, %v", total, minutes, c.total, c.minutes)
			}
		})
	}
}

// TestCheckpointSkipsADisplacedOwnersBatch: a displaced owner's batch that landed after the
// claim that displaced it (it passed its fence check just before) is summed by no accurate
// read, and its marker is no read's checkpoint, before and after the new owner's replay passes
// it; the records behind it are read from the log after the checkpoint instead.
func TestCheckpointSkipsADisplacedOwnersBatch(t *testing.T) {
	ctx := context.Background()
	conn := openDB(t, ctx, "counters_zombie_checkpoint")
	e := &eventual{conn: conn}
	ns := counters.Namespace{Name: "z", Generation: 1}
	exec := func(q string) {
		t.Helper()
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// batch writes partition 0's batch of epoch ending at end: its marker and the adds it
	// counted to counter c.
	batch := func(epoch uint64, end, adds int64) {
		exec(fmt.Sprintf(`INSERT INTO counter_deltas (partition, epoch, end_offset, ns, generation, name, minute, delta, expires) VALUES
			(0, %[1]d, %[2]d, '', 0, '', now(), 0, now() + INTERVAL 1 DAY), (0, %[1]d, %[2]d, 'z', 1, 'c', now(), %[3]d, now() + INTERVAL 1 DAY)`, epoch, end, adds))
	}
	exec(`INSERT INTO counter_partition_claims (partition, epoch, start_offset, owner, claimed_at) VALUES (0, 1, -1, 'a', now64(3)), (0, 2, 100, 'b', now64(3))`)
	// Partition 1 has a claim and no marker left; partition 2 a marker from before claims.
	exec(`INSERT INTO counter_partition_claims (partition, epoch, start_offset, owner, claimed_at) VALUES (1, 1, 40, 'a', now64(3))`)
	exec(`INSERT INTO counter_deltas (partition, epoch, end_offset, ns, generation, name, minute, delta, expires) VALUES (2, 0, 70, '', 0, '', now(), 0, now() + INTERVAL 1 DAY)`)
	cps, _, err := e.checkpoints(ctx, []int32{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int32]int64{1: 40, 2: 70, 3: -1}; !maps.Equal(cps, want) {
		t.Fatalf("checkpoints of a claim alone, a marker alone and neither: got %v; want %v", cps, want)
	}
	batch(1, 100, 10) // the first owner's last batch before the claim of epoch 2
	batch(1, 150, 5)  // its batch that landed after that claim: records 100-150, a zombie's
	for _, step := range []struct {
		name           string
		write          func()
		wantCP, wantUp int64
	}{
		// The new owner has replayed records 100-120: the zombie's marker (150) is the highest,
		// and invalid; the newest claim's start is the checkpoint.
		{"replay behind the zombie", func() { batch(2, 120, 2) }, 100, 10},
		// Past it: the new owner's own marker, and its rows without the zombie's.
		{"replay past the zombie", func() { batch(2, 200, 4) }, 200, 16},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.write()
			cps, fences, err := e.checkpoints(ctx, []int32{0})
			if err != nil {
				t.Fatal(err)
			}
			if cps[0] != step.wantCP {
				t.Fatalf("checkpoint: got %d; want %d", cps[0], step.wantCP)
			}
			sums, err := e.sums(ctx, ns, []string{"c"}, upTo(cps, fences))
			if err != nil {
				t.Fatal(err)
			}
			if sums[0] != step.wantUp {
				t.Fatalf("total up to the checkpoint: got %d; want %d", sums[0], step.wantUp)
			}
		})
	}
}
