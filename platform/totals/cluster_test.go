package totals

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// Every call of the Store works on a Redis Cluster: a store's keys share its name's hash tag,
// so each script and pipeline keeps to one slot (a call that did not would fail with
// CROSSSLOT), and two stores may live on two nodes.
func TestEveryCallOnARedisCluster(t *testing.T) {
	c := testinfra.StartRedisCluster(t, t.TempDir(), "totals-cluster-password").Client(t)
	ctx := context.Background()
	for _, name := range []string{"views", "clicks"} {
		t.Run(name, func(t *testing.T) {
			s := New(c, name)
			if _, err := s.Apply(ctx, 0, 1, Unchecked, 10, map[string]int64{"a": 1}); !errors.As(err, new(*NoGuardError)) {
				t.Fatalf("Apply before any guard: got %v; want a NoGuardError", err)
			}
			if err := s.Set(ctx, 0, Guard{Epoch: 1, End: 10, Chunk: AllChunks}, map[string]int64{"a": 5}); err != nil {
				t.Fatal(err)
			}
			if err := s.Set(ctx, 1, Guard{Epoch: 1, End: 0, Chunk: AllChunks}, nil); err != nil {
				t.Fatal(err)
			}
			if ready, err := s.MarkReadyIfComplete(ctx, 2); err != nil || !ready {
				t.Fatalf("MarkReadyIfComplete: got %v, %v; want ready", ready, err)
			}
			if _, err := s.Claim(ctx, 0, 2); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.Apply(ctx, 0, 2, 10, 20, map[string]int64{"a": 2, "b": 3}); err != nil || !ok {
				t.Fatalf("Apply: got %v, %v; want applied", ok, err)
			}
			if err := s.SetUnique(ctx, map[string]uint64{"a": 4, "b": 1}); err != nil {
				t.Fatal(err)
			}
			if g, err := s.Guard(ctx, 0); err != nil || g.Epoch != 2 || g.End != 20 {
				t.Fatalf("Guard: got %+v, %v; want epoch 2 ending at 20", g, err)
			}
			pipe := c.Pipeline()
			res := s.Queue(ctx, pipe, []string{"a", "b", "none"})
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			views, unique, ready, err := res()
			if err != nil || !ready || !slices.Equal(views, []int64{7, 3, 0}) || !slices.Equal(unique, []uint64{4, 1, 0}) {
				t.Fatalf("Queue: got views %v, unique %v, ready %v, %v; want [7 3 0], [4 1 0], ready", views, unique, ready, err)
			}
			var items []string
			if err := s.Items(ctx, func(it string) { items = append(items, it) }); err != nil {
				t.Fatal(err)
			}
			if slices.Sort(items); !slices.Equal(items, []string{"a", "b"}) {
				t.Fatalf("Items: got %v; want [a b]", items)
			}
			if err := s.Invalidate(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if ready, err := s.Ready(ctx); err != nil || ready {
				t.Fatalf("Ready after Invalidate: got %v, %v; want false", ready, err)
			}
		})
	}
}
