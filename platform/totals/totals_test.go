package totals

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var rdb *redis.Client

func TestMain(m *testing.M) {
	os.Exit(testinfra.WithRedis(func(addr string) int {
		rdb = redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		return m.Run()
	}))
}

// fresh empties Redis and returns a store named after the test.
func fresh(t *testing.T) *Store {
	t.Helper()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return New(rdb, "views")
}

// read returns items' totals through Queue, in one pipeline.
func read(t *testing.T, s *Store, items ...string) ([]int64, []uint64, bool) {
	t.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	res := s.Queue(ctx, pipe, items)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	v, u, ready, err := res()
	if err != nil {
		t.Fatal(err)
	}
	return v, u, ready
}

// batch is one Apply call.
type batch struct {
	epoch  uint64
	end    int64
	deltas map[string]int64
}

// many returns n items item-0000.. with delta d each: more than one chunk when n > ChunkItems.
func many(n int, d int64) map[string]int64 {
	m := make(map[string]int64, n)
	for i := range n {
		m[fmt.Sprintf("item-%05d", i)] = d
	}
	return m
}

func TestApplyGuard(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	start := Guard{Epoch: 5, End: 100, Chunk: AllChunks}
	tests := []struct {
		name    string
		batches []batch
		// prepare runs after the first batch and before the rest.
		prepare     func(t *testing.T, s *Store)
		wantApplied []bool
		wantErr     string // of the last batch
		want        map[string]int64
		wantGuard   Guard
	}{
		{
			name:        "a new batch is applied",
			batches:     []batch{{5, 110, map[string]int64{"a": 3, "b": 1}}},
			wantApplied: []bool{true},
			want:        map[string]int64{"a": 3, "b": 1},
			wantGuard:   Guard{Epoch: 5, End: 110, Chunk: 0, Found: true},
		},
		{
			name:        "a replayed batch is skipped",
			batches:     []batch{{5, 110, map[string]int64{"a": 3}}, {5, 110, map[string]int64{"a": 3}}},
			wantApplied: []bool{true, false},
			want:        map[string]int64{"a": 3},
			wantGuard:   Guard{Epoch: 5, End: 110, Chunk: 0, Found: true},
		},
		{
			name:        "a batch at or below the rebuilt checkpoint is skipped",
			batches:     []batch{{5, 100, map[string]int64{"a": 3}}, {5, 90, map[string]int64{"a": 3}}},
			wantApplied: []bool{false, false},
			want:        map[string]int64{},
			wantGuard:   Guard{Epoch: 5, End: 100, Chunk: AllChunks, Found: true},
		},
		{
			name:    "a partial batch resumes at its next chunk",
			batches: []batch{{5, 110, many(2500, 1)}, {5, 110, many(2500, 1)}},
			prepare: func(t *testing.T, s *Store) {
				// As if the writer died after chunk 0: undo chunks 1 and 2 and their guard.
				undo := map[string]int64{}
				for i := ChunkItems; i < 2500; i++ {
					undo[fmt.Sprintf("item-%05d", i)] = 0
				}
				if err := s.Set(ctx, 0, Guard{Epoch: 5, End: 110, Chunk: 0}, undo); err != nil {
					t.Fatal(err)
				}
			},
			wantApplied: []bool{true, true},
			want:        many(2500, 1),
			wantGuard:   Guard{Epoch: 5, End: 110, Chunk: 2, Found: true},
		},
		{
			name:        "an older epoch is refused",
			batches:     []batch{{4, 200, map[string]int64{"a": 3}}},
			wantApplied: []bool{false},
			wantErr:     "epoch 4 is fenced by epoch 5",
			want:        map[string]int64{},
			wantGuard:   Guard{Epoch: 5, End: 100, Chunk: AllChunks, Found: true},
		},
		{
			name:        "a newer epoch is accepted with a lower end",
			batches:     []batch{{5, 120, map[string]int64{"a": 3}}, {6, 50, map[string]int64{"a": 2}}},
			wantApplied: []bool{true, true},
			want:        map[string]int64{"a": 5},
			wantGuard:   Guard{Epoch: 6, End: 50, Chunk: 0, Found: true},
		},
		{
			name:    "a claimed epoch fences the old writer",
			batches: []batch{{5, 110, map[string]int64{"a": 3}}, {5, 120, map[string]int64{"a": 3}}},
			prepare: func(t *testing.T, s *Store) {
				_, err := s.Claim(ctx, 0, 7)
				mustNil(t, err)
			},
			wantApplied: []bool{true, false},
			wantErr:     "epoch 5 is fenced by epoch 7",
			want:        map[string]int64{"a": 3},
			wantGuard:   Guard{Epoch: 7, End: 110, Chunk: 0, Found: true},
		},
		{
			name:        "negative deltas subtract and a total reaching 0 leaves no field",
			batches:     []batch{{5, 110, map[string]int64{"a": 3, "b": 2}}, {5, 111, map[string]int64{"a": -3, "b": -1}}},
			wantApplied: []bool{true, true},
			want:        map[string]int64{"b": 1},
			wantGuard:   Guard{Epoch: 5, End: 111, Chunk: 0, Found: true},
		},
		{
			name:        "an empty batch advances the guard",
			batches:     []batch{{5, 130, nil}},
			wantApplied: []bool{true},
			want:        map[string]int64{},
			wantGuard:   Guard{Epoch: 5, End: 130, Chunk: 0, Found: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fresh(t)
			mustNil(t, s.Set(ctx, 0, start, nil))
			var err error
			for i, b := range tt.batches {
				if i == 1 && tt.prepare != nil {
					tt.prepare(t, s)
				}
				var applied bool
				applied, err = s.Apply(ctx, 0, b.epoch, Unchecked, b.end, b.deltas)
				if i < len(tt.batches)-1 && err != nil {
					t.Fatalf("batch %d: %v", i, err)
				}
				if applied != tt.wantApplied[i] {
					t.Errorf("batch %d applied: got %v; want %v", i, applied, tt.wantApplied[i])
				}
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("last batch: got error %v; want %q", err, tt.wantErr)
			}
			if tt.wantErr != "" {
				var f *FencedError
				if !errors.As(err, &f) {
					t.Errorf("got %T; want a *FencedError", err)
				}
			}
			checkTotals(t, s, tt.want)
			g, gerr := s.Guard(ctx, 0)
			mustNil(t, gerr)
			if g != tt.wantGuard {
				t.Errorf("guard: got %+v; want %+v", g, tt.wantGuard)
			}
		})
	}
}

// checkTotals compares every total the store holds with want.
func checkTotals(t *testing.T, s *Store, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, s.base+"v:*").Result()
	mustNil(t, err)
	for _, k := range keys {
		m, err := rdb.HGetAll(ctx, k).Result()
		mustNil(t, err)
		for it, v := range m {
			var n int64
			fmt.Sscan(v, &n)
			got[it] = n
		}
	}
	if len(got) != len(want) {
		t.Errorf("totals: got %d items; want %d", len(got), len(want))
	}
	wrong := 0
	for it, n := range want {
		if got[it] != n {
			if wrong++; wrong <= 5 {
				t.Errorf("total of %s: got %d; want %d", it, got[it], n)
			}
		}
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Without a guard (Redis lost its data, or nothing was written yet), nothing is applied and
// Claim creates nothing: the missing guard calls for a rebuild, and must stay visible.
func TestNoGuard(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	applied, err := s.Apply(ctx, 3, 1, Unchecked, 10, map[string]int64{"a": 1})
	var ng *NoGuardError
	if applied || !errors.As(err, &ng) || ng.Partition != 3 {
		t.Errorf("apply: got %v, %v; want false and a *NoGuardError of partition 3", applied, err)
	}
	if _, err := s.Claim(ctx, 3, 2); !errors.As(err, &ng) {
		t.Errorf("claim: got %v; want a *NoGuardError", err)
	}
	g, err := s.Guard(ctx, 3)
	mustNil(t, err)
	if g.Found {
		t.Errorf("guard after claim: got %+v; want none", g)
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("keys: got %d; want 0", n)
	}
}

func TestClaim(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	mustNil(t, s.Set(ctx, 1, Guard{Epoch: 3, End: 40, Chunk: 2}, nil))
	steps := []struct {
		name  string
		epoch uint64
		want  Guard // as the claim found it
	}{
		{"a newer epoch", 4, Guard{Epoch: 3, End: 40, Chunk: 2, Found: true}},
		{"the same again", 4, Guard{Epoch: 4, End: 40, Chunk: 2, Found: true}},
	}
	for _, st := range steps {
		g, err := s.Claim(ctx, 1, st.epoch)
		if err != nil || g != st.want {
			t.Errorf("%s: got %+v, %v; want %+v", st.name, g, err, st.want)
		}
	}
	if g, _ := s.Guard(ctx, 1); g != (Guard{Epoch: 4, End: 40, Chunk: 2, Found: true}) {
		t.Errorf("guard: got %+v; want epoch 4, end 40, chunk 2", g)
	}
	var f *FencedError
	if _, err := s.Claim(ctx, 1, 3); !errors.As(err, &f) || f.GuardEpoch != 4 {
		t.Errorf("claim of an older epoch: got %v; want a *FencedError by epoch 4", err)
	}
	var ng *NoGuardError
	if _, err := s.Claim(ctx, 2, 5); !errors.As(err, &ng) {
		t.Errorf("claim of a partition with no guard: got %v; want a *NoGuardError", err)
	}
	if g, _ := s.Guard(ctx, 2); g.Found {
		t.Errorf("guard after a claim of a partition with none: got %+v; want none", g)
	}
}

func TestSet(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	mustNil(t, s.Set(ctx, 0, Guard{Epoch: 1, End: 9, Chunk: AllChunks}, nil))
	if _, err := s.Apply(ctx, 0, 1, Unchecked, 10, map[string]int64{"a": 5, "b": 7, "c": 1}); err != nil {
		t.Fatal(err)
	}
	// A repair: a overwritten, b deleted, c untouched, many items over several chunks.
	values := many(2100, 4)
	values["a"], values["b"] = 2, 0
	mustNil(t, s.Set(ctx, 0, Guard{Epoch: 2, End: 20, Chunk: AllChunks}, values))
	v, _, _ := read(t, s, "a", "b", "c", "item-00000", "item-02099")
	if fmt.Sprint(v) != "[2 0 1 4 4]" {
		t.Errorf("totals: got %v; want [2 0 1 4 4]", v)
	}
	if g, _ := s.Guard(ctx, 0); g != (Guard{Epoch: 2, End: 20, Chunk: AllChunks, Found: true}) {
		t.Errorf("guard: got %+v; want epoch 2, end 20, all chunks", g)
	}
	var f *FencedError
	if err := s.Set(ctx, 0, Guard{Epoch: 1, End: 30}, map[string]int64{"a": 9}); !errors.As(err, &f) {
		t.Errorf("set of an older epoch: got %v; want a *FencedError", err)
	}
	if v, _, _ := read(t, s, "a"); v[0] != 2 {
		t.Errorf("total after a fenced set: got %d; want 2", v[0])
	}
}

func TestQueueAndReady(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	for p := range int32(3) {
		if p < 2 {
			mustNil(t, s.Set(ctx, p, Guard{Epoch: 1, End: -1, Chunk: AllChunks}, nil))
		}
	}
	if _, err := s.Apply(ctx, 0, 1, Unchecked, 5, map[string]int64{"x": 10, "y": 3}); err != nil {
		t.Fatal(err)
	}
	mustNil(t, s.SetUnique(ctx, map[string]uint64{"x": 4, "z": 2}))
	if ok, err := s.MarkReadyIfComplete(ctx, 3); ok || err != nil {
		t.Errorf("mark ready with partition 2 missing: got %v, %v; want false, nil", ok, err)
	}
	if _, _, ready := read(t, s, "x"); ready {
		t.Error("ready with partition 2 missing: got true; want false")
	}
	mustNil(t, s.Set(ctx, 2, Guard{Epoch: 1, End: -1, Chunk: AllChunks}, nil))
	if ok, err := s.MarkReadyIfComplete(ctx, 3); !ok || err != nil {
		t.Errorf("mark ready: got %v, %v; want true, nil", ok, err)
	}
	v, u, ready := read(t, s, "x", "unknown", "y", "z", "x")
	if fmt.Sprint(v, u, ready) != "[10 0 3 0 10] [4 0 0 2 4] true" {
		t.Errorf("got %v %v %v; want [10 0 3 0 10] [4 0 0 2 4] true", v, u, ready)
	}
	if ok, _ := s.Ready(ctx); !ok {
		t.Error("Ready: got false; want true")
	}
	// Other stores are apart.
	if v, _, ready := read(t, New(rdb, "clicks"), "x"); v[0] != 0 || ready {
		t.Errorf("another name: got %d, ready %v; want 0, false", v[0], ready)
	}
	// The page's reads and a caller's own commands share one pipeline.
	pipe := rdb.Pipeline()
	res := s.Queue(ctx, pipe, []string{"x"})
	other := pipe.Get(ctx, "not-there")
	if _, err := pipe.Exec(ctx); !errors.Is(err, redis.Nil) {
		t.Fatalf("exec: got %v; want redis.Nil of the caller's GET", err)
	}
	if v, _, _, err := res(); err != nil || v[0] != 10 || !errors.Is(other.Err(), redis.Nil) {
		t.Errorf("got %v, %v, %v; want [10] with the caller's command answered too", v, err, other.Err())
	}
}

// Reading unknown ids and unique estimates of 0 leave no key behind.
func TestUnknownIDsLeaveNoKey(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	items := make([]string, 100)
	for i := range items {
		items[i] = fmt.Sprintf("nobody-%d", i)
	}
	v, _, _ := read(t, s, items...)
	mustNil(t, s.SetUnique(ctx, map[string]uint64{"nobody-1": 0}))
	if n := rdb.DBSize(ctx).Val(); n != 0 || v[0] != 0 {
		t.Errorf("after reading 100 unknown ids: got %d keys, total %d; want 0 keys, 0", n, v[0])
	}
}

// Writers of different partitions and readers at once: every total ends exact.
func TestConcurrentWritersAndReaders(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	s := fresh(t)
	const parts, batches = 4, 20
	for p := range int32(parts) {
		mustNil(t, s.Set(ctx, p, Guard{Epoch: 1, End: -1, Chunk: AllChunks}, nil))
	}
	var writers, readers sync.WaitGroup
	errs := make(chan error, parts+2)
	for p := range int32(parts) {
		writers.Go(func() {
			for b := range int64(batches) {
				// Each batch twice: the replay must change nothing.
				for range 2 {
					if _, err := s.Apply(ctx, p, 1, Unchecked, b, map[string]int64{"shared": 1, fmt.Sprintf("own-%d", p): 2}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	stop := make(chan struct{})
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				pipe := rdb.Pipeline()
				res := s.Queue(ctx, pipe, []string{"shared", "own-0"})
				if _, err := pipe.Exec(ctx); err != nil {
					errs <- err
					return
				}
				if _, _, _, err := res(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, _, _ := read(t, s, "shared", "own-0", "own-3")
	if fmt.Sprint(v) != fmt.Sprint([]int64{parts * batches, 2 * batches, 2 * batches}) {
		t.Errorf("got %v; want [%d %d %d]", v, parts*batches, 2*batches, 2*batches)
	}
}

// The embedded server's hash limits are the ones the layout is sized for.
func TestEmbeddedRedisFitsLayout(t *testing.T) {
	ctx := context.Background()
	for k, want := range map[string]string{"hash-max-listpack-entries": fmt.Sprint(ListpackEntries), "hash-max-listpack-value": fmt.Sprint(ListpackValue)} {
		if got := rdb.ConfigGet(ctx, k).Val()[k]; got != want {
			t.Errorf("%s: got %q; want %q", k, got, want)
		}
	}
}

func TestOutOfRange(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	if _, err := s.Apply(ctx, 0, 1<<53, Unchecked, 1, nil); err == nil {
		t.Error("epoch 2^53: got no error; want one")
	}
	if err := s.Set(ctx, 0, Guard{Epoch: 1, End: -2}, nil); err == nil {
		t.Error("end -2: got no error; want one")
	}
}

// Invalidate sends readers away (the marker goes) and refuses applies to the partition until it
// is rebuilt with Set, after which the marker comes back once every partition has a guard; the
// other partitions' guards stay.
func TestInvalidate(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	for p := range int32(2) {
		mustNil(t, s.Set(ctx, p, Guard{Epoch: 7, End: 50, Chunk: AllChunks}, map[string]int64{fmt.Sprint("item-", p): 3}))
	}
	if ok, err := s.MarkReadyIfComplete(ctx, 2); err != nil || !ok {
		t.Fatalf("mark ready: got %v, %v; want true", ok, err)
	}
	mustNil(t, s.Invalidate(ctx, 0))
	tests := []struct {
		name string
		got  func() any
		want any
	}{
		{"ready marker", func() any { ok, err := s.Ready(ctx); mustNil(t, err); return ok }, false},
		{"guard of partition 0", func() any { g, err := s.Guard(ctx, 0); mustNil(t, err); return g.Found }, false},
		{"guard of partition 1", func() any { g, err := s.Guard(ctx, 1); mustNil(t, err); return g.Found }, true},
		{"apply to partition 0", func() any {
			_, err := s.Apply(ctx, 0, 8, Unchecked, 60, map[string]int64{"item-0": 1})
			var ng *NoGuardError
			return errors.As(err, &ng)
		}, true},
		{"ready marker before the rebuild", func() any { ok, err := s.MarkReadyIfComplete(ctx, 2); mustNil(t, err); return ok }, false},
		{"ready marker after the rebuild", func() any {
			mustNil(t, s.Set(ctx, 0, Guard{Epoch: 8, End: 60, Chunk: AllChunks}, map[string]int64{"item-0": 4}))
			ok, err := s.MarkReadyIfComplete(ctx, 2)
			mustNil(t, err)
			return ok
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.got(); got != tt.want {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

// Items lists every item with a total or an estimate once, across many buckets and both kinds.
func TestItems(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		views  map[string]int64
		unique map[string]uint64
		want   int
	}{
		{"empty", nil, nil, 0},
		{"totals and estimates of the same items", many(3000, 1), map[string]uint64{"item-00001": 5, "item-02999": 9}, 3000},
		{"estimates only", nil, map[string]uint64{"u-1": 1, "u-2": 2}, 2},
		{"both, partly overlapping", map[string]int64{"a": 1, "b": 2}, map[string]uint64{"b": 1, "c": 1}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fresh(t)
			mustNil(t, s.Set(ctx, 0, Guard{Epoch: 1, End: 1, Chunk: AllChunks}, tt.views))
			mustNil(t, s.SetUnique(ctx, tt.unique))
			seen := map[string]int{}
			mustNil(t, s.Items(ctx, func(it string) { seen[it]++ }))
			if len(seen) != tt.want {
				t.Errorf("got %d items; want %d", len(seen), tt.want)
			}
			for it, n := range seen {
				if n != 1 {
					t.Errorf("%s: got %d calls; want 1", it, n)
				}
			}
		})
	}
}

// A batch applied with after checked goes on top of the caller's last batch only: when Redis
// lost acknowledged writes (a failover to a replica they had not reached), the guard is behind
// and Apply refuses, saying where the guard is, so that the caller catches up from its source of
// truth instead of applying on top and skipping the lost batches.
func TestApplyAfterRefusesWhatRedisLost(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		guard     Guard // where Redis is before the batch
		after     int64 // where the caller's last batch ended
		deltas    map[string]int64
		wantA     int64 // item-00000 afterwards
		wantGuard int64 // the guard's end in the *BehindError; 0: none wanted
	}{
		{"guard where the last batch ended", Guard{Epoch: 1, End: 20, Chunk: 0}, 20, many(3, 5), 15, 0},
		{"several chunks on top", Guard{Epoch: 1, End: 20, Chunk: AllChunks}, 20, many(2*ChunkItems+1, 5), 15, 0},
		{"the last batch lost", Guard{Epoch: 2, End: 10, Chunk: 0}, 20, many(3, 5), 10, 10},
		{"a newer claim lost with its batches", Guard{Epoch: 1, End: 10, Chunk: 0}, 20, many(3, 5), 10, 10},
		{"unchecked applies on top", Guard{Epoch: 1, End: 10, Chunk: 0}, Unchecked, many(3, 5), 15, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fresh(t)
			mustNil(t, s.Set(ctx, 0, tt.guard, map[string]int64{"item-00000": 10}))
			applied, err := s.Apply(ctx, 0, 2, tt.after, 30, tt.deltas)
			var behind *BehindError
			switch {
			case tt.wantGuard == 0 && (err != nil || !applied):
				t.Fatalf("apply: got %v, %v; want applied", applied, err)
			case tt.wantGuard != 0 && (applied || !errors.As(err, &behind) || behind.GuardEnd != tt.wantGuard || behind.After != tt.after):
				t.Fatalf("apply: got %v, %v; want refused with a *BehindError at %d after %d", applied, err, tt.wantGuard, tt.after)
			}
			if v, _, _ := read(t, s, "item-00000"); v[0] != tt.wantA {
				t.Errorf("item-00000: got %d; want %d", v[0], tt.wantA)
			}
		})
	}
}

// A repair fixes items of a partition whose totals are whole, and only then: in a Redis that
// lost its data, or whose guard is not where the caller's checkpoint is, it writes nothing and
// creates no guard (which would vouch for the repaired items alone and let the ready marker
// be set over a partition without its other totals).
func TestRepairNeedsTheGuard(t *testing.T) {
	ctx := context.Background()
	at := Guard{Epoch: 2, End: 50, Chunk: AllChunks}
	tests := []struct {
		name  string
		guard *Guard // the partition's guard before the repair; nil: none
		want  any    // the error type wanted; nil: the repair writes
	}{
		{"guard at the checkpoint", &at, nil},
		{"no guard (redis emptied)", nil, &NoGuardError{}},
		{"guard behind (failover to a replica)", &Guard{Epoch: 2, End: 40, Chunk: AllChunks}, &BehindError{}},
		{"guard of an older epoch", &Guard{Epoch: 1, End: 50, Chunk: AllChunks}, &BehindError{}},
		{"guard of a newer owner", &Guard{Epoch: 3, End: 60, Chunk: AllChunks}, &FencedError{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fresh(t)
			if tt.guard != nil {
				mustNil(t, s.Set(ctx, 0, *tt.guard, map[string]int64{"a": 1}))
				mustNil(t, s.Set(ctx, 1, *tt.guard, nil))
			}
			err := s.Repair(ctx, 0, at, map[string]int64{"a": 7, "b": 3})
			wantA, wantB := int64(7), int64(3)
			switch want := tt.want.(type) {
			case nil:
				mustNil(t, err)
			case *NoGuardError:
				if !errors.As(err, &want) {
					t.Fatalf("repair: got %v; want a *NoGuardError", err)
				}
				wantA, wantB = 0, 0
			case *BehindError:
				if !errors.As(err, &want) {
					t.Fatalf("repair: got %v; want a *BehindError", err)
				}
				wantA, wantB = 1, 0
			case *FencedError:
				if !errors.As(err, &want) {
					t.Fatalf("repair: got %v; want a *FencedError", err)
				}
				wantA, wantB = 1, 0
			}
			if v, _, _ := read(t, s, "a", "b"); v[0] != wantA || v[1] != wantB {
				t.Errorf("totals after the repair: got %v; want [%d %d]", v, wantA, wantB)
			}
			g, err := s.Guard(ctx, 0)
			mustNil(t, err)
			if want := tt.guard; (want == nil && g.Found) || (want != nil && g != (Guard{Epoch: want.Epoch, End: want.End, Chunk: want.Chunk, Found: true})) {
				t.Errorf("guard after the repair: got %+v; want %+v (unchanged)", g, want)
			}
			ready, err := s.MarkReadyIfComplete(ctx, 2)
			mustNil(t, err)
			if ready != (tt.guard != nil) {
				t.Errorf("ready after the repair: got %v; want %v", ready, tt.guard != nil)
			}
		})
	}
}

// A rebuild that Redis loses its data under, between two of its chunks, stops there: the rest
// of the values and the guard are refused, so the partition stays without a guard (to be
// rebuilt again) rather than holding a guard over the chunks written after the loss. A rebuild
// under way does not count as a guard for the ready marker, nor for Apply.
// A rebuild over a whole guard that is cut short (its writer killed after the first chunk, or a
// newer owner's rebuild beginning meanwhile) leaves no guard over part of the values: until a
// rebuild ends, applies and claims are refused, readers are not told the totals are whole, and
// an older rebuild's later chunks are fenced.
func TestSetCutShortLeavesNoGuard(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	values := many(2100, 5) // three chunks
	items := slices.Sorted(maps.Keys(values))
	mustNil(t, s.Set(ctx, 0, Guard{Epoch: 1, End: 30, Chunk: AllChunks}, many(2100, 1)))
	if ok, err := s.MarkReadyIfComplete(ctx, 1); !ok || err != nil {
		t.Fatalf("ready: got %v, %v; want true", ok, err)
	}
	g := Guard{Epoch: 2, End: 50, Chunk: AllChunks}
	mustNil(t, s.overwriteChunk(ctx, 0, g, "b", items[:ChunkItems], values))
	if got, err := s.Guard(ctx, 0); got != (Guard{Pending: 2}) || err != nil {
		t.Errorf("guard after a rebuild's first chunk: got %+v, %v; want none, epoch 2's rebuild pending", got, err)
	}
	if _, _, ready := read(t, s, items[0]); ready {
		t.Error("ready after a rebuild's first chunk: got true; want false")
	}
	if _, err := s.Apply(ctx, 0, 1, 30, 40, map[string]int64{"x": 1}); !errors.As(err, new(*NoGuardError)) {
		t.Errorf("apply of the previous owner during the rebuild: got %v; want a *NoGuardError", err)
	}
	if _, err := s.Claim(ctx, 0, 3); !errors.As(err, new(*NoGuardError)) {
		t.Errorf("claim during the rebuild: got %v; want a *NoGuardError", err)
	}
	// A newer owner begins its own rebuild: the older one's next chunks are fenced.
	mustNil(t, s.overwriteChunk(ctx, 0, Guard{Epoch: 3, End: 60, Chunk: AllChunks}, "b", items[:ChunkItems], values))
	var f *FencedError
	if err := s.overwriteChunk(ctx, 0, g, "e", items[ChunkItems:], values); !errors.As(err, &f) || f.GuardEpoch != 3 {
		t.Errorf("the older rebuild's last chunk: got %v; want a *FencedError by epoch 3", err)
	}
	if got, _ := s.Guard(ctx, 0); got.Found {
		t.Errorf("guard after the older rebuild's refused chunk: got %+v; want none", got)
	}
}

func TestSetLosesNothingMidway(t *testing.T) {
	ctx := context.Background()
	s := fresh(t)
	g := Guard{Epoch: 1, End: 30, Chunk: AllChunks}
	values := many(2100, 5) // three chunks
	items := slices.Sorted(maps.Keys(values))
	// The first chunk is written, then Redis loses its data; the next chunks are refused.
	mustNil(t, s.overwriteChunk(ctx, 0, g, "b", items[:ChunkItems], values))
	if ok, err := s.MarkReadyIfComplete(ctx, 1); ok || err != nil {
		t.Errorf("ready during a rebuild: got %v, %v; want false", ok, err)
	}
	if _, err := s.Apply(ctx, 0, 1, Unchecked, 31, map[string]int64{"x": 1}); !errors.As(err, new(*NoGuardError)) {
		t.Errorf("apply during a rebuild: got %v; want a *NoGuardError", err)
	}
	mustNil(t, rdb.FlushAll(ctx).Err())
	for _, step := range []string{"", "e"} {
		if err := s.overwriteChunk(ctx, 0, g, step, items[ChunkItems:2*ChunkItems], values); !errors.As(err, new(*NoGuardError)) {
			t.Errorf("chunk %q after the loss: got %v; want a *NoGuardError", step, err)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("keys after the refused chunks: got %d; want 0", n)
	}
	// Whole, the rebuild writes every value and the guard.
	mustNil(t, s.Set(ctx, 0, g, values))
	if got, _ := s.Guard(ctx, 0); got != (Guard{Epoch: 1, End: 30, Chunk: AllChunks, Found: true}) {
		t.Errorf("guard after the rebuild: got %+v; want epoch 1, end 30, all chunks", got)
	}
	if v, _, _ := read(t, s, items[0], items[len(items)-1]); v[0] != 5 || v[1] != 5 {
		t.Errorf("totals after the rebuild: got %v; want [5 5]", v)
	}
	if n := rdb.HLen(ctx, s.guardKey(0)).Val(); n != 3 {
		t.Errorf("guard fields after the rebuild: got %d; want 3 (no pending mark left)", n)
	}
}

// pipelineFields records the estimates (HSET pairs, HDEL fields) each pipeline that carries any
// holds (the connection's handshake is a pipeline too).
type pipelineFields struct {
	mu     sync.Mutex
	rounds []int
}

func (h *pipelineFields) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineFields) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineFields) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			switch c.Name() {
			case "hset":
				n += (len(c.Args()) - 2) / 2
			case "hdel":
				n += len(c.Args()) - 2
			}
		}
		if n > 0 {
			h.mu.Lock()
			h.rounds = append(h.rounds, n)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// SetUnique writes a catalog's estimates in rounds of bounded size (every reply of one pipeline
// must arrive within the client's read timeout), and every estimate lands, deletions included.
func TestSetUniqueInRounds(t *testing.T) {
	ctx := context.Background()
	estimates := func(n int, v uint64) map[string]uint64 {
		m := make(map[string]uint64, n)
		for it := range many(n, 1) {
			m[it] = v
		}
		return m
	}
	tests := []struct {
		name       string
		round      int
		before     map[string]uint64
		set        map[string]uint64
		wantRounds int // at least
	}{
		{"a few estimates, one round", estimatesRound, nil, estimates(10, 3), 1},
		{"a catalog in rounds", 100, nil, estimates(2500, 7), 25},
		{"sets and deletions", 100, estimates(600, 2), func() map[string]uint64 {
			m := estimates(600, 0)
			for it := range estimates(300, 9) {
				m[it] = 9
			}
			return m
		}(), 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fresh(t)
			mustNil(t, s.SetUnique(ctx, tt.before))
			hooked := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
			defer hooked.Close()
			h := &pipelineFields{}
			hooked.AddHook(h)
			s = New(hooked, "views")
			s.uniqueRound = tt.round
			mustNil(t, s.SetUnique(ctx, tt.set))
			if len(h.rounds) < tt.wantRounds {
				t.Errorf("got %d pipelines; want at least %d", len(h.rounds), tt.wantRounds)
			}
			total := 0
			for i, n := range h.rounds {
				if n > tt.round {
					t.Errorf("pipeline %d: got %d estimates; want at most %d", i, n, tt.round)
				}
				total += n
			}
			if total != len(tt.set) {
				t.Errorf("got %d estimates sent; want %d", total, len(tt.set))
			}
			items := slices.Sorted(maps.Keys(tt.set))
			_, unique, _ := read(t, s, items...)
			for i, it := range items {
				if unique[i] != tt.set[it] {
					t.Errorf("estimate of %s: got %d; want %d", it, unique[i], tt.set[it])
				}
			}
		})
	}
}
