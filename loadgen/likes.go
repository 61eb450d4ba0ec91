package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
)

// Kinds of the likes change stream.
const (
	kindLike   = 0
	kindUnlike = 1
)

// likesStreams are the likes scenario: PUT or DELETE (even odds) /v1/items/<hot>/likes/<user>
// for a random user at LikeRate, checking that every answer's total is at least zero, and
// GET /v1/users/<user>/likes?ids=<LikedByIDs items, the hot one included> at LikedByRate.
type likesStreams struct {
	changes, likedBy *openLoop
	negative         atomic.Int64 // answers with "likes" < 0
}

func userID(prefix string, i int) string { return prefix + "-u" + strconv.Itoa(i) }

func newLikesStreams(c Config, cl *http.Client, prefix string, rng *rand.Rand) *likesStreams {
	hot := prefix + "-hot"
	changeURLs := make([]string, c.Users)
	for i := range changeURLs {
		changeURLs[i] = c.URL + "/v1/items/" + hot + "/likes/" + userID(prefix, i)
	}
	s := &likesStreams{changes: &openLoop{rate: float64(c.LikeRate), workers: c.MaxInflight, warmup: c.Warmup,
		kinds: []string{"PUT like", "DELETE unlike"}}}
	errs := &s.changes.errs
	s.changes.fire = func(ctx context.Context, rng *rand.Rand, buf *bytes.Buffer) (int, bool) {
		kind, method := kindLike, http.MethodPut
		if rng.IntN(2) == 1 {
			kind, method = kindUnlike, http.MethodDelete
		}
		code, err := do(ctx, cl, method, changeURLs[rng.IntN(len(changeURLs))], nil, buf)
		if !errs.wantOK(ctx, method+" like", code, err, buf.Bytes()) {
			return kind, false
		}
		n, ok := jsonInt(buf.Bytes(), "likes")
		if !ok || n < 0 {
			s.negative.Add(1)
			errs.add(ctx, method+" like", fmt.Errorf("answer %q: want \"likes\" >= 0", buf.Bytes()))
			return kind, false
		}
		return kind, true
	}
	if c.LikedByRate > 0 {
		urls := make([]string, urlRing)
		for i := range urls {
			ids := hot
			if c.LikedByIDs > 1 {
				ids += "," + idsParam(prefix, pickIDs(rng, c.LikedByIDs-1, c.Items+1))
			}
			urls[i] = c.URL + "/v1/users/" + userID(prefix, rng.IntN(c.Users)) + "/likes?ids=" + ids
		}
		s.likedBy = getLoop(c, cl, c.LikedByRate, "GET /v1/users/{id}/likes", "GET liked-by", urls)
	}
	return s
}
