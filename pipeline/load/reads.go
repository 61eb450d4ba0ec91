package load

import (
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

// readsStream is GET /v1/counts?ids=<ReadIDs items of the views scenario's pool, hot item
// included in the draw> at ReadRate, open loop.
func readsStream(c Config, cl *http.Client, prefix string, rng *rand.Rand) *openLoop {
	urls := make([]string, urlRing)
	for i := range urls {
		urls[i] = c.URL + "/v1/counts?ids=" + idsParam(prefix, pickIDs(rng, c.ReadIDs, c.Items+1))
	}
	return getLoop(c, cl, c.ReadRate, "GET /v1/counts", "GET /v1/counts", urls)
}
