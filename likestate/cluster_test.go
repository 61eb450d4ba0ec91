package likestate

import (
	"context"
	"testing"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// Every call of the Store works on a Redis Cluster: each command and script keeps to one slot
// (a call that did not would fail with CROSSSLOT), and the state reads back as written.
func TestEveryCallOnARedisCluster(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	rdb := testinfra.StartRedisCluster(t, t.TempDir(), "likestate-cluster-password").Client(t)
	s := NewStore(rdb)
	ctx := context.Background()

	l, ok, err := s.BeginRebuild(ctx)
	if err != nil || !ok {
		t.Fatalf("BeginRebuild: got %v, %v; want the lease", ok, err)
	}
	recs := []Record{
		{Partition: 0, Offset: 0, Like: schemas.Like{ItemID: "a", UserID: "u1", Liked: true}},
		{Partition: 0, Offset: 1, Like: schemas.Like{ItemID: "a", UserID: "u2", Liked: true}},
		{Partition: 1, Offset: 0, Like: schemas.Like{ItemID: "b", UserID: "u1", Liked: true}},
	}
	behind, err := s.ApplyRecords(ctx, recs, []Mark{{Partition: 0, Floor: -1, End: 2}, {Partition: 1, Floor: -1, End: 1}})
	if err != nil || len(behind) != 0 {
		t.Fatalf("ApplyRecords: got behind %v, %v; want none", behind, err)
	}
	if done, err := s.FinishRebuild(ctx, l, Snapshot{0: 2, 1: 1}); err != nil || !done {
		t.Fatalf("FinishRebuild: got %v, %v; want done", done, err)
	}
	if ready, err := s.Ready(ctx); err != nil || !ready {
		t.Fatalf("Ready: got %v, %v; want true", ready, err)
	}
	got, err := s.Apply(ctx, schemas.Like{ItemID: "a", UserID: "u1", Liked: false}, 2)
	if err != nil || got != (Result{Liked: false, Total: 1}) {
		t.Fatalf("Apply unlike: got %+v, %v; want unliked with total 1", got, err)
	}
	if behind, err := s.Behind(ctx, map[int32]int64{0: 2, 1: 1}); err != nil || len(behind) != 0 {
		t.Fatalf("Behind: got %v, %v; want none", behind, err)
	}
	totals, err := s.Totals(ctx, []string{"a", "b", "c"})
	if err != nil || totals["a"] != 1 || totals["b"] != 1 || totals["c"] != 0 {
		t.Fatalf("Totals: got %v, %v; want a 1, b 1, c 0", totals, err)
	}
	liked, err := s.LikedBy(ctx, "u1", []string{"a", "b"})
	if err != nil || liked["a"] || !liked["b"] {
		t.Fatalf("LikedBy u1: got %v, %v; want b only", liked, err)
	}
	if fixed, err := s.Repair(ctx, "b", "u3", PairState{Liked: true, Offset: 0, HasOffset: true}, 1); err != nil || !fixed {
		t.Fatalf("Repair: got %v, %v; want repaired", fixed, err)
	}
	if err := s.Recount(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	states, err := s.ItemStates(ctx, []string{"a", "b"})
	if err != nil || states["a"].Total != 1 || states["b"].Total != 2 || !states["b"].Pairs["u3"].Liked {
		t.Fatalf("ItemStates: got %+v, %v; want a 1, b 2 with u3", states, err)
	}
}
