package likestate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// readyStore is a store on the test Redis, flushed and marked ready (no applier).
func readyStore(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	flushRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Set(context.Background(), ReadyKey, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return NewStore(rdb), rdb
}

// Records of one pair may be applied in any order (the request path and the applier race):
// the state is always that of the highest offset, and the total counts states, not changes.
func TestApplyOrdersByOffset(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	s, _ := readyStore(t)
	ctx := context.Background()
	type step struct {
		offset  int64
		liked   bool
		request bool // through Apply (the request path) rather than ApplyRecords (the applier)
	}
	tests := []struct {
		name      string
		steps     []step
		wantLiked bool
	}{
		{"like then unlike", []step{{10, true, true}, {11, false, true}}, false},
		{"unlike applied before the older like", []step{{11, false, true}, {10, true, false}}, false},
		{"two devices: like at 10, unlike at 11, applier first", []step{{11, false, false}, {10, true, true}}, false},
		{"double tap", []step{{10, true, true}, {10, true, false}, {12, true, true}}, true},
		{"old records replayed after the newest", []step{{12, true, true}, {11, false, false}, {10, false, false}}, true},
		{"unlike of a pair never liked", []step{{5, false, true}}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := fmt.Sprintf("order-%d", i)
			// A second user keeps a like on the item, so a wrong total shows as 0 or 2.
			if _, err := s.ApplyRecords(ctx, []Record{{Offset: 1, Like: schemas.Like{ItemID: item, UserID: "other", Liked: true}}}, nil); err != nil {
				t.Fatal(err)
			}
			for _, st := range tt.steps {
				l := schemas.Like{ItemID: item, UserID: "u", Liked: st.liked}
				if st.request {
					if _, err := s.Apply(ctx, l, st.offset); err != nil {
						t.Fatal(err)
					}
				} else if _, err := s.ApplyRecords(ctx, []Record{{Offset: st.offset, Like: l}}, nil); err != nil {
					t.Fatal(err)
				}
			}
			liked, err := s.LikedBy(ctx, "u", []string{item})
			if err != nil {
				t.Fatal(err)
			}
			totals, err := s.Totals(ctx, []string{item})
			if err != nil {
				t.Fatal(err)
			}
			wantTotal := int64(1)
			if tt.wantLiked {
				wantTotal = 2
			}
			if liked[item] != tt.wantLiked || totals[item] != wantTotal {
				t.Fatalf("got liked=%v total=%d; want liked=%v total=%d", liked[item], totals[item], tt.wantLiked, wantTotal)
			}
		})
	}
}

// Without the ready marker (Redis came back empty) the request path changes nothing and says
// so; the applier still writes, because it is the one rebuilding.
func TestApplyRefusesWhileRebuilding(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	s, rdb := readyStore(t)
	ctx := context.Background()
	if err := rdb.Del(ctx, ReadyKey).Err(); err != nil {
		t.Fatal(err)
	}
	l := schemas.Like{ItemID: "rb", UserID: "u", Liked: true}
	if _, err := s.Apply(ctx, l, 3); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Apply while rebuilding: got %v; want ErrNotReady", err)
	}
	if n, err := rdb.SCard(ctx, UsersKey("rb", Shard("u"))).Result(); err != nil || n != 0 {
		t.Fatalf("got %d members, %v after a refused apply; want 0", n, err)
	}
	if _, err := s.ApplyRecords(ctx, []Record{{Offset: 3, Like: l}}, nil); err != nil {
		t.Fatalf("ApplyRecords while rebuilding: got %v; want nil", err)
	}
	if _, err := s.Totals(ctx, []string{"rb"}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Totals while rebuilding: got %v; want ErrNotReady", err)
	}
}

// A hot item's likers spread over the shards' keys, and the total is their exact sum.
func TestLikersSpreadOverShards(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	s, rdb := readyStore(t)
	ctx := context.Background()
	recs := make([]Record, 400)
	for i := range recs {
		recs[i] = Record{Offset: int64(i), Like: schemas.Like{ItemID: "hot", UserID: fmt.Sprintf("user-%d", i), Liked: true}}
	}
	if _, err := s.ApplyRecords(ctx, recs, nil); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for k := range Shards {
		n, err := rdb.SCard(ctx, UsersKey("hot", k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n < 400/Shards/3 || n > 400/Shards*3 {
			t.Errorf("shard %d: got %d likers; want about %d", k, n, 400/Shards)
		}
		sum += n
	}
	totals, err := s.Totals(ctx, []string{"hot"})
	if err != nil {
		t.Fatal(err)
	}
	if sum != 400 || totals["hot"] != 400 {
		t.Fatalf("got shard sum %d and total %d; want 400", sum, totals["hot"])
	}
}

// Every script that changes a set leaves the item's total key equal to the sum of its sets'
// sizes (absent when they are all empty), so the totals read from it count states; Recount
// restores that after writes behind the scripts' backs.
func TestTotalKeyFollowsSets(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	s, rdb := readyStore(t)
	ctx := context.Background()
	like := func(item string, i int, liked bool) schemas.Like {
		return schemas.Like{ItemID: item, UserID: fmt.Sprintf("user-%d", i), Liked: liked}
	}
	// apply applies, on the request path, user i's change of item at offset off.
	apply := func(t *testing.T, item string, off, i int, liked bool) {
		t.Helper()
		if _, err := s.Apply(ctx, like(item, i, liked), int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		do        func(t *testing.T, item string)
		wantTotal int64
	}{
		{"request path: 40 likes, 15 unlikes", func(t *testing.T, item string) {
			for i := range 55 {
				apply(t, item, i, i%40, i < 40)
			}
		}, 25},
		{"applier: 40 likes, 15 unlikes, replayed twice", func(t *testing.T, item string) {
			recs := make([]Record, 55)
			for i := range recs {
				recs[i] = Record{Offset: int64(i), Like: like(item, i%40, i < 40)}
			}
			for range 2 {
				if _, err := s.ApplyRecords(ctx, recs, nil); err != nil {
					t.Fatal(err)
				}
			}
		}, 25},
		{"the last liker of each shard leaves", func(t *testing.T, item string) {
			for i := range 40 {
				apply(t, item, i, i%20, i < 20)
			}
		}, 0},
		{"repair", func(t *testing.T, item string) {
			for i := range 10 {
				if _, err := s.Repair(ctx, item, fmt.Sprintf("user-%d", i), PairState{Liked: i%3 != 0, Offset: int64(i), HasOffset: true}, 100); err != nil {
					t.Fatal(err)
				}
			}
		}, 6},
		{"a lost total key is counted from the sets at the next change", func(t *testing.T, item string) {
			for i := range 5 {
				apply(t, item, i, i, true)
			}
			if err := rdb.Del(ctx, TotalKey(item)).Err(); err != nil {
				t.Fatal(err)
			}
			apply(t, item, 5, 5, true)
		}, 6},
		{"a total drifted to zero is counted from the sets at the next change", func(t *testing.T, item string) {
			for i := range 3 {
				apply(t, item, i, i, true)
			}
			if err := rdb.Set(ctx, TotalKey(item), "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			apply(t, item, 3, 0, false)
		}, 2},
		{"recount after writes behind the scripts' backs", func(t *testing.T, item string) {
			apply(t, item, 1, 1, true)
			if err := rdb.SAdd(ctx, UsersKey(item, 2), "ghost-1", "ghost-2").Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Set(ctx, TotalKey(item), "7", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Recount(ctx, item); err != nil {
				t.Fatal(err)
			}
		}, 3},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := fmt.Sprintf("total-%d", i)
			tt.do(t, item)
			var sum int64
			for k := range Shards {
				n, err := rdb.SCard(ctx, UsersKey(item, k)).Result()
				if err != nil {
					t.Fatal(err)
				}
				sum += n
			}
			got, err := rdb.Get(ctx, TotalKey(item)).Result()
			if sum == 0 {
				if !errors.Is(err, redis.Nil) {
					t.Errorf("got total key %q, %v with every set empty; want none", got, err)
				}
			} else if want := strconv.FormatInt(sum, 10); err != nil || got != want {
				t.Errorf("got total key %q, %v; want %s (the sets' sizes)", got, err, want)
			}
			totals, err := s.Totals(ctx, []string{item})
			if err != nil {
				t.Fatal(err)
			}
			if totals[item] != tt.wantTotal {
				t.Errorf("total: got %d; want %d", totals[item], tt.wantTotal)
			}
		})
	}
}

// A rebuild marks the state ready only while it still holds the rebuild lease: one whose lease
// was lost (Redis emptied mid-rebuild, or another applier took over) must start over.
func TestRebuildLease(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx := context.Background()
	tests := []struct {
		name      string
		meanwhile func(t *testing.T, s *Store, rdb *redis.Client)
		wantDone  bool
	}{
		{"kept", func(t *testing.T, s *Store, rdb *redis.Client) {
			if _, mine, err := s.BeginRebuild(ctx); mine || err != nil {
				t.Fatalf("second rebuild while one holds the lease: got mine %v, err %v; want false, nil", mine, err)
			}
		}, true},
		{"lost to FLUSHALL", func(t *testing.T, s *Store, rdb *redis.Client) {
			flushRedis(t)
		}, false},
		{"lost to another applier", func(t *testing.T, s *Store, rdb *redis.Client) {
			rdb.Del(ctx, rebuildingKey) // as if it had expired
			if _, mine, err := s.BeginRebuild(ctx); !mine || err != nil {
				t.Fatalf("rebuild after the lease expired: got mine %v, err %v; want true, nil", mine, err)
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flushRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
			defer rdb.Close()
			s := NewStore(rdb)
			held, mine, err := s.BeginRebuild(ctx)
			if !mine || err != nil {
				t.Fatalf("begin: got mine %v, err %v; want true, nil", mine, err)
			}
			tt.meanwhile(t, s, rdb)
			done, err := s.FinishRebuild(ctx, held, nil)
			if err != nil {
				t.Fatal(err)
			}
			ready := rdb.Exists(ctx, ReadyKey).Val() == 1
			if done != tt.wantDone || ready != tt.wantDone {
				t.Fatalf("finish: got done %v, ready %v; want %v, %v", done, ready, tt.wantDone, tt.wantDone)
			}
			if tt.wantDone && rdb.Exists(ctx, rebuildingKey).Val() != 0 {
				t.Fatal("lease still held after the rebuild finished")
			}
		})
	}
}

// A batch moves its partition's mark only from where the caller left it (or above); a mark
// found below (a failover lost it) stays, and is reported, with the batch's changes applied
// all the same. Behind reads the same verdict without writing.
func TestMarksReportLostChanges(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx := context.Background()
	tests := []struct {
		name       string
		stored     string // the mark in Redis before ("": none)
		floor, end int64
		behind     bool
		want       string // the mark after
	}{
		{"first batch, no mark expected", "", -1, 10, false, "10"},
		{"mark where the caller left it", "10", 10, 25, false, "25"},
		{"mark ahead (a rebuild raised it)", "40", 10, 25, false, "40"},
		{"mark behind (lost)", "4", 10, 25, true, "4"},
		{"mark lost whole", "", 10, 25, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, rdb := readyStore(t)
			if tt.stored != "" {
				if err := rdb.Set(ctx, AppliedKey(3), tt.stored, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			wantBehind := map[int32]int64(nil)
			if tt.behind {
				found, _ := strconv.ParseInt(tt.stored, 10, 64)
				if tt.stored == "" {
					found = -1
				}
				wantBehind = map[int32]int64{3: found}
			}
			checked, err := s.Behind(ctx, map[int32]int64{3: tt.floor})
			if err != nil || fmt.Sprint(checked) != fmt.Sprint(wantBehind) {
				t.Errorf("Behind: got %v, %v; want %v", checked, err, wantBehind)
			}
			l := schemas.Like{ItemID: "it", UserID: "u", Liked: true}
			behind, err := s.ApplyRecords(ctx, []Record{{Partition: 3, Offset: tt.end - 1, Like: l}}, []Mark{{Partition: 3, Floor: tt.floor, End: tt.end}})
			if err != nil || fmt.Sprint(behind) != fmt.Sprint(wantBehind) {
				t.Errorf("ApplyRecords: got behind %v, %v; want %v", behind, err, wantBehind)
			}
			got, err := rdb.Get(ctx, AppliedKey(3)).Result()
			if errors.Is(err, redis.Nil) {
				got, err = "", nil
			}
			if err != nil || got != tt.want {
				t.Errorf("got mark %q, %v; want %q", got, err, tt.want)
			}
			if liked, err := rdb.SIsMember(ctx, UsersKey("it", Shard("u")), "u").Result(); err != nil || !liked {
				t.Errorf("got liked %v, %v; want the batch's change applied", liked, err)
			}
		})
	}
}

// A rebuild that finishes raises every partition's mark to where it read the log, never
// lowers one.
func TestFinishRebuildRaisesMarks(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx := context.Background()
	s, rdb := readyStore(t)
	if err := rdb.Del(ctx, ReadyKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, AppliedKey(1), "90", 0).Err(); err != nil {
		t.Fatal(err)
	}
	held, mine, err := s.BeginRebuild(ctx)
	if err != nil || !mine {
		t.Fatalf("BeginRebuild: got %v, %v; want the lease", mine, err)
	}
	if done, err := s.FinishRebuild(ctx, held, Snapshot{0: 50, 1: 70}); err != nil || !done {
		t.Fatalf("FinishRebuild: got %v, %v; want done", done, err)
	}
	for p, want := range map[int32]string{0: "50", 1: "90"} {
		if got, err := rdb.Get(ctx, AppliedKey(p)).Result(); err != nil || got != want {
			t.Errorf("partition %d: got mark %q, %v; want %q", p, got, err, want)
		}
	}
}
