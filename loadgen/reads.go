package loadgen

import (
	"context"
	"math/rand/v2"

	"github.com/tallypipeline/tally/client"
)

// urlRing is how many distinct pre-built URLs an open-loop stream cycles through: enough that
// the server sees varied requests, built once so the generator only picks one per request.
const urlRing = 4096

// pickIDs draws n distinct indexes from [0, limit) (all of them when limit <= n).
func pickIDs(rng *rand.Rand, n, limit int) []int {
	if limit <= n {
		out := make([]int, limit)
		for i := range out {
			out[i] = i
		}
		return out
	}
	seen := make(map[int]bool, n)
	out := make([]int, 0, n)
	for len(out) < n {
		if i := rng.IntN(limit); !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out
}

// itemIDs names the items of idx.
func itemIDs(prefix string, idx []int) []string {
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = itemID(prefix, i)
	}
	return out
}

// feedPage returns the item indexes of one feed page of n ids: the hot item (0) first, then n-1
// distinct items drawn uniformly from the catalog, items 1..catalog (all of them when the
// catalog is smaller than the page).
func feedPage(rng *rand.Rand, n, catalog int) []int {
	drawn := pickIDs(rng, n-1, catalog)
	out := make([]int, 1, 1+len(drawn))
	for _, i := range drawn {
		out = append(out, i+1)
	}
	return out
}

// readsStream is GET /v1/counts?ids=<a feed page: the hot item and ReadIDs-1 items of the
// catalog> at ReadRate, open loop. Each request draws its own page, so that a catalog of a
// million items is read across, not through a few thousand pre-built pages.
func readsStream(c Config, api *client.Client, prefix string) *openLoop {
	const kind = "GET /v1/counts"
	o := &openLoop{rate: float64(c.ReadRate), workers: c.MaxInflight, warmup: c.Warmup, kinds: []string{kind}}
	o.fire = func(ctx context.Context, rng *rand.Rand) (int, bool) {
		_, err := api.Counts(ctx, itemIDs(prefix, feedPage(rng, c.ReadIDs, c.Catalog))...)
		return 0, o.result(ctx, kind, err)
	}
	return o
}
