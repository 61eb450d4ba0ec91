package reconcile

import (
	"context"
	"fmt"

	"github.com/tallypipeline/tally/likestate"
)

// checkRedis compares the serving state of items with the log, pair by pair, and repairs each
// differing pair with the store's repair script (which leaves a pair alone if a record newer
// than the snapshot reached it meanwhile). An item whose total key is not the number of likers
// its sets hold differs too (with Pairs 0 when its pairs agree), and its total is recounted
// after its pairs are repaired.
func checkRedis(ctx context.Context, d Deps, st *logState, items []string) ([]Diff, error) {
	if len(items) == 0 {
		return nil, nil
	}
	// A state being rebuilt is incomplete on purpose; comparing it would report the rebuild.
	ready, err := d.Store.Ready(ctx)
	if err != nil {
		return nil, err
	}
	if !ready {
		return nil, fmt.Errorf("check redis: %w; run the job again once likes are served", likestate.ErrNotReady)
	}
	var diffs []Diff
	err = batches(items, 100, func(batch []string) error {
		states, err := d.Store.ItemStates(ctx, batch)
		if err != nil {
			return err
		}
		for _, item := range batch {
			state := states[item]
			got := make(map[string]observed, len(state.Pairs))
			for user, p := range state.Pairs {
				got[user] = observed{liked: p.Liked, offset: p.Offset, has: p.HasOffset}
			}
			end := st.snap[st.partition[item]]
			c := compare(st.last[item], got, end, false)
			// The total key is set by the scripts that change the sets, so it disagrees with
			// them only behind the scripts' backs; reads serve it, so it is checked too.
			if len(c.drift) == 0 && state.Total == state.Liked {
				continue
			}
			df := Diff{ItemID: item, Source: "redis", Expected: c.expected, Actual: c.actual, Pairs: len(c.drift), Repaired: true}
			if len(c.drift) == 0 {
				df.Expected, df.Actual = state.Liked, state.Total
			}
			for _, user := range c.drift {
				r, inLog := st.last[item][user]
				if _, err := d.Store.Repair(ctx, item, user, likestate.PairState{Liked: r.liked, Offset: r.offset, HasOffset: inLog}, end); err != nil {
					d.Logger.Error("repair redis like state", "item_id", item, "user_id", user, "err", err)
					df.Repaired = false
				}
			}
			// A repair that changes a pair also recounts the total, but one that finds a
			// newer record changes nothing: recount whenever the total disagreed.
			if state.Total != state.Liked {
				if err := d.Store.Recount(ctx, item); err != nil {
					d.Logger.Error("recount redis like total", "item_id", item, "err", err)
					df.Repaired = false
				}
			}
			d.Logger.Warn("redis like state differed from the log", "item_id", item, "pairs", df.Pairs,
				"expected", df.Expected, "actual", df.Actual, "repaired", df.Repaired)
			diffs = append(diffs, df)
		}
		return nil
	})
	return diffs, err
}
