package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"

	"github.com/tallypipeline/tally/client"
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

func newLikesStreams(c Config, api *client.Client, prefix string, rng *rand.Rand) *likesStreams {
	hot := prefix + "-hot"
	users := make([]string, c.Users)
	for i := range users {
		users[i] = userID(prefix, i)
	}
	s := &likesStreams{changes: &openLoop{rate: float64(c.LikeRate), workers: c.MaxInflight, warmup: c.Warmup,
		kinds: []string{"PUT like", "DELETE unlike"}}}
	errs := &s.changes.errs
	s.changes.fire = func(ctx context.Context, rng *rand.Rand) (int, bool) {
		kind, what, change := kindLike, "PUT like", api.Like
		if rng.IntN(2) == 1 {
			kind, what, change = kindUnlike, "DELETE like", api.Unlike
		}
		st, err := change(ctx, hot, users[rng.IntN(len(users))], "")
		if !errs.ok(ctx, what, err) {
			return kind, false
		}
		if st.Likes < 0 {
			s.negative.Add(1)
			errs.add(ctx, what, fmt.Errorf("answer %+v: want likes >= 0", st))
			return kind, false
		}
		return kind, true
	}
	if c.LikedByRate > 0 {
		// Pages are drawn once, so the generator only picks one per request.
		type page struct {
			user  string
			items []string
		}
		pages := make([]page, urlRing)
		for i := range pages {
			items := []string{hot}
			if c.LikedByIDs > 1 {
				items = append(items, itemIDs(prefix, pickIDs(rng, c.LikedByIDs-1, c.Items+1))...)
			}
			pages[i] = page{user: users[rng.IntN(len(users))], items: items}
		}
		const kind = "GET /v1/users/{id}/likes"
		o := &openLoop{rate: float64(c.LikedByRate), workers: c.MaxInflight, warmup: c.Warmup, kinds: []string{kind}}
		o.fire = func(ctx context.Context, rng *rand.Rand) (int, bool) {
			p := pages[rng.IntN(len(pages))]
			_, err := api.Liked(ctx, p.user, p.items...)
			return 0, o.result(ctx, "GET liked-by", err)
		}
		s.likedBy = o
	}
	return s
}
