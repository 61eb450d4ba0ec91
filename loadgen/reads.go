package loadgen

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
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

// idsParam joins the item ids of idx for an ids= query parameter.
func idsParam(prefix string, idx []int) string {
	var b strings.Builder
	for k, i := range idx {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(itemID(prefix, i))
	}
	return b.String()
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
func readsStream(c Config, cl *http.Client, prefix string) *openLoop {
	const kind = "GET /v1/counts"
	o := &openLoop{rate: float64(c.ReadRate), workers: c.MaxInflight, warmup: c.Warmup, kinds: []string{kind}}
	base := c.URL + "/v1/counts?ids="
	o.fire = func(ctx context.Context, rng *rand.Rand, buf *bytes.Buffer) (int, bool) {
		code, err := do(ctx, cl, http.MethodGet, base+idsParam(prefix, feedPage(rng, c.ReadIDs, c.Catalog)), nil, buf)
		return 0, o.errs.wantOK(ctx, kind, code, err, buf.Bytes())
	}
	return o
}
