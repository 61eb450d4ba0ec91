package likestate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// followed is what a Follower's Handler was given.
type followed struct {
	mu       sync.Mutex
	offsets  map[[2]int64]int // (partition, offset) -> times handed over
	bad      int
	oversize int // batches beyond MaxBatch
	polls    int // BeforePoll calls
}

func (f *followed) handler(maxBatch int) Handler {
	return Handler{
		BeforePoll: func(context.Context) { f.mu.Lock(); f.polls++; f.mu.Unlock() },
		Handle: func(_ context.Context, b Batch) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(b.Records)+len(b.Bad) > maxBatch {
				f.oversize++
			}
			for _, r := range b.Records {
				f.offsets[[2]int64{int64(r.Partition), r.Offset}]++
			}
			for _, r := range b.Bad {
				f.offsets[[2]int64{int64(r.Rec.Partition), r.Rec.Offset}]++
				if r.Err != nil {
					f.bad++
				}
			}
			return nil
		},
	}
}

func (f *followed) count() (records, twice int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.offsets {
		records += n
		if n > 1 {
			twice++
		}
	}
	return records, twice
}

func produceLikes(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, values [][]byte) {
	t.Helper()
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("item"), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func likeValues(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = schemas.AppendLike(nil, schemas.Like{ItemID: "item", UserID: fmt.Sprintf("u%d", i), Liked: true, TS: time.Now().UnixMilli()})
	}
	return out
}

// A Follower hands every record over once, bad ones apart, in batches of at most MaxBatch, and
// commits what it handled: a follower of the same group started later gets only newer records.
func TestFollowerHandsOverEveryRecordOnce(t *testing.T) {
	tests := []struct {
		name   string
		linger time.Duration
	}{
		{"every poll", 0},
		{"lingering", 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testinfra.VerifyNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			topic := "likes-follow-" + fmt.Sprint(tt.linger.Milliseconds())
			cl := infra.Producer(t, topic, 1)
			values := append(likeValues(30), []byte("junk"), schemas.AppendLike(nil, schemas.Like{ItemID: "item", UserID: "", Liked: true}))
			produceLikes(t, ctx, cl, topic, values)
			cfg := FollowConfig{Log: Log{Brokers: []string{infra.Kafka.Addr()}, Topic: topic, Group: topic}, ClientID: "tally-likes-test",
				MaxBatch: 7, Linger: tt.linger, Idle: 100 * time.Millisecond}

			first := &followed{offsets: map[[2]int64]int{}}
			runFollower(t, cfg, first, func() (bool, string) {
				n, _ := first.count()
				return n == len(values), fmt.Sprintf("%d of %d records handed over", n, len(values))
			})
			if n, twice := first.count(); n != len(values) || twice != 0 || first.bad != 2 || first.oversize != 0 || first.polls == 0 {
				t.Errorf("got %d records (%d twice), %d bad, %d batches over MaxBatch, %d BeforePoll calls; want %d, 0, 2, 0, some",
					n, twice, first.bad, first.oversize, first.polls, len(values))
			}

			produceLikes(t, ctx, cl, topic, likeValues(3))
			second := &followed{offsets: map[[2]int64]int{}}
			runFollower(t, cfg, second, func() (bool, string) {
				n, _ := second.count()
				return n >= 3, fmt.Sprintf("%d of 3 new records handed over", n)
			})
			want := map[[2]int64]int{{0, int64(len(values))}: 1, {0, int64(len(values) + 1)}: 1, {0, int64(len(values) + 2)}: 1}
			if fmt.Sprint(second.offsets) != fmt.Sprint(want) {
				t.Errorf("after a restart: got offsets %v; want %v", second.offsets, want)
			}
		})
	}
}

// runFollower runs a Follower with f's handler until done holds.
func runFollower(t *testing.T, cfg FollowConfig, f *followed, done func() (bool, string)) {
	t.Helper()
	fl, err := NewFollower(cfg, f.handler(cfg.MaxBatch), infra.Logger)
	if err != nil {
		t.Fatal(err)
	}
	fl.Start()
	testinfra.WaitFor(t, 20*time.Second, "records handed over", done)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fl.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
