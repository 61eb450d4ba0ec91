package migrate

import (
	"context"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// One INSERT into view_rollup_input fills each rollup with its buckets' sums, negative
// corrections included, stored as one row per bucket and none for a bucket that sums to 0: the
// rollup tables sum the rows of a block as they store it (migration 029 left that to them).
func TestRollupsSumABlocksRowsPerBucket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn := infra.DB(t, ctx, "migrate_rollups")
	if _, err := ApplyTo(ctx, conn, infra.Logger, Target{}); err != nil {
		t.Fatal(err)
	}
	noon := testinfra.RecentNoon()
	rows := []struct {
		item  string
		at    time.Duration // after noon
		views int64
	}{
		{"a", time.Second, 2},
		{"a", 2 * time.Second, 3},
		{"a", 59*time.Minute + 59*time.Second, 4},
		{"a", 61 * time.Minute, 1},
		{"a", 61*time.Minute + time.Second, -1}, // a zombie's view undone
		{"b", 30 * time.Second, 7},
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO view_rollup_input (item_id, second, views)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := b.Append(r.item, noon.Add(r.at), r.views); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		table, column string
		want          map[string]int64 // item@bucket offset from noon -> views; no row sums to 0
	}{
		{"views_by_minute", "minute", map[string]int64{"a@0s": 5, "a@59m0s": 4, "b@0s": 7}},
		{"views_by_hour", "hour", map[string]int64{"a@0s": 9, "b@0s": 7}},
		{"views_total_by_day", "day", map[string]int64{"a@-12h0m0s": 9, "b@-12h0m0s": 7}},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			got := map[string]int64{}
			q := "SELECT item_id, toDateTime(" + tt.column + ", 'UTC'), views FROM " + tt.table
			r, err := conn.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for r.Next() {
				var item string
				var bucket time.Time
				var views int64
				if err := r.Scan(&item, &bucket, &views); err != nil {
					t.Fatal(err)
				}
				key := item + "@" + bucket.Sub(noon).String()
				if _, ok := got[key]; ok {
					t.Errorf("bucket %s stored in more than one row", key)
				}
				got[key] = views
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %d buckets %v; want %d %v", len(got), got, len(tt.want), tt.want)
			}
			for k, w := range tt.want {
				if got[k] != w {
					t.Errorf("%s: got %d views; want %d", k, got[k], w)
				}
			}
		})
	}
}
