package counters

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// Every call of BestEffort works on a Redis Cluster: a counter's keys (its count, its tokens,
// its hours of distinct members) share its hash tag, so each script, transaction and PFCOUNT
// keeps to one slot (one that did not would fail with CROSSSLOT), and counters of one read
// spread over the nodes.
func TestBestEffortOnARedisCluster(t *testing.T) {
	rdb := testinfra.StartRedisCluster(t, t.TempDir(), "counters-cluster-password").Client(t)
	b, ctx := NewBestEffort(rdb), context.Background()
	ns := Namespace{Name: "shares", Generation: 1, Mode: ModeBestEffort, Retention: time.Hour, IdempotencyWindow: time.Minute}

	if _, err := b.Add(ctx, ns, "a", 5, "t1"); err != nil {
		t.Fatal(err)
	}
	if o, err := b.Add(ctx, ns, "a", 5, "t1"); err != nil || !o.Duplicate || o.Count != 5 {
		t.Fatalf("Add with a repeated token: got %+v, %v; want a duplicate at 5", o, err)
	}
	var changes []Change
	for i := range 20 {
		changes = append(changes, Change{Name: string(rune('b' + i)), Delta: int64(i + 1), Token: "m"})
	}
	if dups, over, err := b.AddMany(ctx, ns, changes); err != nil || dups != 0 || len(over) != 0 {
		t.Fatalf("AddMany: got %d duplicates, overflow %v, %v; want none", dups, over, err)
	}
	if _, err := b.Clear(ctx, ns, "b", "c1"); err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(ctx, ns, []string{"a", "b", "c", "u", "none"})
	if err != nil || !slices.Equal(got, []int64{5, 0, 2, 20, 0}) {
		t.Fatalf("Get: got %v, %v; want [5 0 2 20 0]", got, err)
	}
	hour := time.Now().Truncate(time.Hour)
	for i, m := range []string{"x", "y", "x", "z"} {
		if err := b.AddDistinct(ctx, ns, "a", m, hour.Add(time.Duration(i-2)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.Distinct(ctx, ns, "a", hour.Add(-2*time.Hour), hour.Add(2*time.Hour)); err != nil || n != 3 {
		t.Fatalf("Distinct over four hours: got %d, %v; want 3", n, err)
	}
}
