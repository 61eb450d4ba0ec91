package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tallypipeline/tally/client"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// likePair is one (item, user) pair of the like load.
type likePair struct{ item, user string }

// likeLoad changes likes from several workers, each with users of its own, through the
// collectors in turn, each change retried by the Go client until a collector answers it.
type likeLoad struct {
	sent  atomic.Int64
	stop  chan struct{}
	done  chan error
	mu    sync.Mutex
	state map[likePair]bool // each pair's last acknowledged change
	items []string
}

const (
	likeWorkers = 4
	likeUsers   = 25 // per worker
	likeItems   = 20
)

// goSendLikes starts the like load on apis; stopAndWait ends it.
func goSendLikes(t *testing.T, ctx context.Context, apis []string) *likeLoad {
	t.Helper()
	l := &likeLoad{stop: make(chan struct{}), done: make(chan error, likeWorkers), state: map[likePair]bool{}}
	for i := range likeItems {
		l.items = append(l.items, fmt.Sprintf("like-item-%d", i))
	}
	clients := make([]*client.Client, len(apis))
	for i, api := range apis {
		c, err := client.New(client.Options{BaseURL: api, MaxAttempts: 200, RetryBase: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	for w := range likeWorkers {
		go func() { l.done <- l.work(ctx, w, clients) }()
	}
	return l
}

// work toggles random pairs of worker w's users, one change at a time.
func (l *likeLoad) work(ctx context.Context, w int, clients []*client.Client) error {
	rng := rand.New(rand.NewPCG(uint64(w), 77))
	mine := map[likePair]bool{}
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return nil
		case <-time.After(10 * time.Millisecond):
		}
		p := likePair{l.items[rng.IntN(likeItems)], fmt.Sprintf("liker-%d-%d", w, rng.IntN(likeUsers))}
		c := clients[i%len(clients)]
		change := c.Like
		if mine[p] {
			change = c.Unlike
		}
		st, err := change(ctx, p.item, p.user, "")
		if err != nil {
			return fmt.Errorf("like change %d of worker %d (%v): %w", i, w, p, err)
		}
		if st.Liked == mine[p] {
			return fmt.Errorf("like change of %v: got liked=%v; want %v", p, st.Liked, !mine[p])
		}
		mine[p] = st.Liked
		l.mu.Lock()
		l.state[p] = st.Liked
		l.mu.Unlock()
		l.sent.Add(1)
	}
}

// stopAndWait ends the load and returns the first worker's error.
func (l *likeLoad) stopAndWait() error {
	close(l.stop)
	var first error
	for range likeWorkers {
		if err := <-l.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// verifyLikes checks that the likes log ends in the state the load's acknowledged changes left,
// then waits until the API (Redis) answers that state: every item's total and every user's
// likes.
func verifyLikes(t *testing.T, ctx context.Context, kc kafkaConn, api string, l *likeLoad) {
	t.Helper()
	dial, err := kc.sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	logged := map[likePair]bool{}
	_, _, err = likestate.Replay(ctx, strings.Split(kc.addr, ","), schemas.TopicLikes, slog.New(slog.NewTextHandler(io.Discard, nil)), func(recs []likestate.Record) error {
		for _, r := range recs {
			logged[likePair{r.Like.ItemID, r.Like.UserID}] = r.Like.Liked
		}
		return nil
	}, dial...)
	if err != nil {
		t.Fatalf("read the likes log: %v", err)
	}
	var wrong []string
	for p, liked := range l.state {
		if logged[p] != liked {
			wrong = append(wrong, fmt.Sprintf("%v: log ends liked=%v; want %v (the last acknowledged change)", p, logged[p], liked))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Fatalf("%d pairs differ between the log and the acknowledged changes:\n%s", len(wrong), strings.Join(wrong[:min(10, len(wrong))], "\n"))
	}
	c, err := client.New(client.Options{BaseURL: api})
	if err != nil {
		t.Fatal(err)
	}
	testinfra.WaitFor(t, time.Minute, "likes served equal to the log", func() (bool, string) {
		d, err := diffLikes(ctx, c, l.items, logged)
		return err == nil && d == "", d + fmt.Sprint(" ", err)
	})
	t.Logf("%d like changes over %d pairs; served state equal to the log", l.sent.Load(), len(l.state))
}

// diffLikes compares the API's totals and users' likes with want; "" when they agree.
func diffLikes(ctx context.Context, c *client.Client, items []string, want map[likePair]bool) (string, error) {
	counts, err := c.Counts(ctx, items...)
	if err != nil {
		return "", err
	}
	wantTotal := map[string]int64{}
	users := map[string]bool{}
	for p, liked := range want {
		wantTotal[p.item] += int64(btoi(liked))
		users[p.user] = true
	}
	var diffs []string
	for _, got := range counts {
		if got.Likes != wantTotal[got.ItemID] {
			diffs = append(diffs, fmt.Sprintf("%s: got %d likes; want %d", got.ItemID, got.Likes, wantTotal[got.ItemID]))
		}
	}
	for u := range users {
		liked, err := c.Liked(ctx, u, items...)
		if err != nil {
			return "", err
		}
		for _, it := range items {
			if liked[it] != want[likePair{it, u}] {
				diffs = append(diffs, fmt.Sprintf("%s/%s: got liked=%v; want %v", it, u, liked[it], want[likePair{it, u}]))
			}
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs[:min(10, len(diffs))], "; "), nil
}
