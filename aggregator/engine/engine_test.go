package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/aggregator/member"
)

// part is the fake rule set's partition: the records of its batch.
type part struct {
	id      int32
	epoch   uint64
	next    int64
	batched int
}

func (p *part) ID() int32     { return p.id }
func (p *part) Epoch() uint64 { return p.epoch }
func (p *part) Batched() int  { return p.batched }

// rules is a rule set of pure logic: it claims a partition at offset 10*id, counts every record
// and writes by moving each pending partition's checkpoint to its position. A write takes took of
// the clock.
type rules struct {
	clock   *time.Time
	took    time.Duration
	failFor map[int32]bool // Claim fails for these
	// together, when set, makes every Claim but a failing one wait until together claims are
	// under way, or its context ends, or a second passes (then it fails).
	together int
	arrived  atomic.Int32
	all      chan struct{}
	canceled atomic.Int32 // claims that stopped waiting because their context ended
	claimed  [][]int32    // the partitions of each Claimed call
	writes   []Flush
}

func (r *rules) Claim(ctx context.Context, id int32) (*part, Start, error) {
	if r.failFor[id] {
		return nil, Start{}, errors.New("state unreadable")
	}
	if r.together > 0 {
		if int(r.arrived.Add(1)) == r.together {
			close(r.all)
		}
		select {
		case <-r.all:
		case <-ctx.Done():
			r.canceled.Add(1)
			return nil, Start{}, ctx.Err()
		case <-time.After(time.Second):
			return nil, Start{}, errors.New("claimed alone: the other claims did not start")
		}
	}
	return &part{id: id, epoch: 1, next: 10 * int64(id)}, Start{At: map[string]int64{"t": 10 * int64(id)}}, nil
}

func (r *rules) Claimed(_ context.Context, ps []*part) {
	var ids []int32
	for _, p := range ps {
		ids = append(ids, p.id)
	}
	r.claimed = append(r.claimed, ids)
}

func (r *rules) Apply(p *part, _ string, recs []*kgo.Record) Applied {
	n := 0
	for _, rec := range recs {
		if rec.Offset >= p.next {
			p.next = rec.Offset + 1
			p.batched++
			n++
		}
	}
	return Applied{Records: n, Counted: n}
}

func (r *rules) Write(_ context.Context, f Flush) (member.Offsets, error) {
	r.writes = append(r.writes, f)
	*r.clock = r.clock.Add(r.took)
	done := map[int32]int64{}
	for id := range f.Only {
		done[id] = 0 // marks which partitions a revoke wrote
	}
	if len(done) == 0 {
		return nil, nil
	}
	return member.Offsets{"t": done}, nil
}

func newTestEngine(t *testing.T, r *rules, maxBatch int) *Engine[*part] {
	t.Helper()
	return New(Config{Stream: "test", Metrics: Names{Records: "tally_test_records_total", Counted: "tally_test_counted_total", SetAside: "tally_test_undecodable_total", FlushSeconds: "tally_test_flush_seconds", FlushErrors: "tally_test_flush_errors_total", Fenced: "tally_test_fenced_partitions_total", Lag: "tally_test_flush_lag_seconds", ClaimSeconds: "tally_test_claim_seconds"}, FlushInterval: time.Second, MaxBatch: maxBatch, Now: func() time.Time { return *r.clock },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry()}, Rules[*part](r))
}

func recs(offsets ...int64) []*kgo.Record {
	out := make([]*kgo.Record, len(offsets))
	for i, o := range offsets {
		out[i] = &kgo.Record{Offset: o}
	}
	return out
}

func TestAssignPlacesEveryPartitionsStart(t *testing.T) {
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &rules{clock: &clock}
	e := newTestEngine(t, r, 100)
	got, err := e.Assign(context.Background(), []int32{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int32]int64{2: 20, 3: 30}; !maps.Equal(got.At["t"], want) {
		t.Errorf("got starts %v; want %v", got.At["t"], want)
	}
	if len(r.claimed) != 1 || !slices.Equal(r.claimed[0], []int32{2, 3}) {
		t.Errorf("got Claimed calls %v; want one with [2 3]", r.claimed)
	}
	if err := e.Check(context.Background()); err != nil {
		t.Errorf("got readiness %v after a good assignment; want nil", err)
	}
}

// A partition whose state does not load fails the assignment (the member retries it) and is
// not held; Claimed is not called for a half-loaded assignment.
func TestAssignFailure(t *testing.T) {
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &rules{clock: &clock, failFor: map[int32]bool{5: true}}
	e := newTestEngine(t, r, 100)
	if _, err := e.Assign(context.Background(), []int32{5}); err == nil {
		t.Fatal("got no error for a partition whose state does not load; want one")
	}
	if got := e.Held(nil); len(got) != 0 {
		t.Errorf("got %d partitions held; want 0", len(got))
	}
	if len(r.claimed) != 0 {
		t.Errorf("got Claimed calls %v; want none", r.claimed)
	}
}

// The partitions of an assignment are claimed together (a member cannot rejoin its group until
// they all are), and the first failure ends the claims still waiting.
func TestAssignClaimsTogether(t *testing.T) {
	tests := []struct {
		name    string
		failFor map[int32]bool
		want    string // the error; "" for none
	}{
		{"all claimed", nil, ""},
		{"one fails", map[int32]bool{2: true}, "load test partition 2 state: state unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
			r := &rules{clock: &clock, failFor: tt.failFor, together: DefaultClaimWorkers, all: make(chan struct{})}
			e := newTestEngine(t, r, 100)
			ids := []int32{0, 1, 2, 3, 4, 5}[:DefaultClaimWorkers]
			resume, err := e.Assign(context.Background(), ids)
			if got := fmt.Sprint(err); tt.want != "" && got != tt.want || tt.want == "" && err != nil {
				t.Fatalf("got error %v; want %q", err, tt.want)
			}
			if tt.want != "" {
				if got, want := int(r.canceled.Load()), DefaultClaimWorkers-1; got != want {
					t.Errorf("got %d waiting claims ended by the failure; want %d", got, want)
				}
				return
			}
			if got := len(resume.At["t"]); got != len(ids) {
				t.Errorf("got starts of %d partitions; want %d", got, len(ids))
			}
			if got := len(e.Held(nil)); got != len(ids) {
				t.Errorf("got %d partitions held; want %d", got, len(ids))
			}
			var m dto.Metric
			if err := e.m.claimSeconds.Write(&m); err != nil || m.GetHistogram().GetSampleCount() != uint64(len(ids)) {
				t.Errorf("got %d claims timed (%v); want %d", m.GetHistogram().GetSampleCount(), err, len(ids))
			}
		})
	}
}

// With ClaimWorkers 1 (ClickHouse quorum inserts) the claims run one after another: two that
// wait for each other never meet.
func TestAssignClaimsOneAtATimeWhenTold(t *testing.T) {
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &rules{clock: &clock, together: 2, all: make(chan struct{})}
	e := newTestEngine(t, r, 100)
	e.c.ClaimWorkers = 1
	_, err := e.Assign(context.Background(), []int32{0, 1})
	if want := "load test partition 0 state: claimed alone: the other claims did not start"; fmt.Sprint(err) != want {
		t.Errorf("got error %v; want %q", err, want)
	}
}

func TestFlushDue(t *testing.T) {
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &rules{clock: &clock}
	e := newTestEngine(t, r, 3)
	if _, err := e.Assign(context.Background(), []int32{0}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		advance time.Duration
		records int
		want    bool
	}{
		{"fresh", 0, 0, false},
		{"before the interval", 999 * time.Millisecond, 0, false},
		{"batch full", 0, 3, true},
		{"interval passed", 2 * time.Second, 0, true},
	}
	next := int64(0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock = clock.Add(tt.advance)
			for range tt.records {
				e.Process("t", 0, recs(next))
				next++
			}
			if got := e.FlushDue(); got != tt.want {
				t.Errorf("got FlushDue %v; want %v", got, tt.want)
			}
		})
	}
}

// The engine follows its flush schedule (flushpace): a flush slower than the interval is
// followed by at least half its time of consuming, unless a batch is full.
func TestFlushDueAfterASlowFlush(t *testing.T) {
	tests := []struct {
		name       string
		took       time.Duration // the last flush's duration
		endedSince time.Duration // how long ago it ended
		records    int
		want       bool
	}{
		{"quick flush, interval passed", 200 * time.Millisecond, 800 * time.Millisecond, 0, true},
		{"quick flush, interval not passed", 200 * time.Millisecond, 700 * time.Millisecond, 0, false},
		{"slow flush, just ended", 3 * time.Second, 10 * time.Millisecond, 0, false},
		{"slow flush, consumed a third of it", 3 * time.Second, time.Second, 0, false},
		{"slow flush, consumed half of it", 3 * time.Second, 1500 * time.Millisecond, 0, true},
		{"slow flush, batch full", 3 * time.Second, 10 * time.Millisecond, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
			r := &rules{clock: &clock, took: tt.took}
			e := newTestEngine(t, r, 3)
			if _, err := e.Assign(context.Background(), []int32{0}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock = clock.Add(tt.endedSince)
			for i := range tt.records {
				e.Process("t", 0, recs(int64(i)))
			}
			if got := e.FlushDue(); got != tt.want {
				t.Errorf("got FlushDue %v; want %v", got, tt.want)
			}
		})
	}
}

// Process counts what the rule set applied; records of a partition not held are dropped, and
// reclaimed only when a fence check dropped it (a partition revoked or lost is not).
func TestProcessAndReclaims(t *testing.T) {
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &rules{clock: &clock}
	e := newTestEngine(t, r, 100)
	if _, err := e.Assign(context.Background(), []int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	e.Process("t", 1, recs(9, 10, 11)) // 9 is below partition 1's start
	if got := testutil.ToFloat64(e.m.records); got != 2 {
		t.Errorf("got %v records counted; want 2", got)
	}
	e.mu.Lock()
	p2 := e.parts[2]
	delete(e.parts, 2) // as CheckClaims drops a partition a newer owner claimed
	e.fenced[2] = true
	e.mu.Unlock()
	e.Lost([]int32{3})
	e.Process("t", 2, recs(20))
	e.Process("t", 3, recs(30))
	e.Process("t", 4, recs(40))
	if got := e.Reclaims(); !slices.Equal(got, []int32{2}) {
		t.Errorf("got reclaims %v; want [2]", got)
	}
	if got := e.Reclaims(); len(got) != 0 {
		t.Errorf("got reclaims %v a second time; want none", got)
	}
	if e.Holds(p2) {
		t.Error("got partition 2 held after the fence dropped it; want not held")
	}
}

// Revoke writes only the revoked partitions, with everything held (All), and forgets them.
func TestRevoke(t *testing.T) {
	clock := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &rules{clock: &clock}
	e := newTestEngine(t, r, 100)
	if _, err := e.Assign(context.Background(), []int32{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	done, err := e.Revoke(context.Background(), []int32{1, 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(done["t"])); !slices.Equal(got, []int32{1, 3}) {
		t.Errorf("got revoke writing %v; want [1 3]", got)
	}
	if w := r.writes[len(r.writes)-1]; w.Mode != All {
		t.Errorf("got revoke's flush mode %v; want All", w.Mode)
	}
	var held []int32
	for _, p := range e.Held(nil) {
		held = append(held, p.id)
	}
	if !slices.Equal(held, []int32{2}) {
		t.Errorf("got %v held after the revoke; want [2]", held)
	}
}
