package likes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// A Redis failover to a replica that had not received the last writes loses changes the old
// primary acknowledged: the request path's own and the applier's, with ReadyKey still set.
// The test stands the promoted replica in with a copy of Redis taken earlier (DUMP, then
// FLUSHALL and RESTORE after more changes that moved the marks) and wants the state back equal
// to the log within a few CheckEvery, the applier having found the marks behind.
func TestApplierRestoresChangesAFailoverLost(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "failover")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deadline := time.Now().Add(30 * time.Second)
	changes := func(round int) {
		t.Helper()
		for i := range 40 {
			item, user := fmt.Sprintf("item%d", i%7), fmt.Sprintf("user%d", i)
			liked := (i+round)%3 != 0
			if _, err := change(e.client, e.srv.URL, item, user, liked, deadline); err != nil {
				t.Fatal(err)
			}
			// Every fourth change reaches only the log, for the applier to apply.
			l := schemas.Like{ItemID: item, UserID: "log-" + user, Liked: liked, TS: time.Now().UnixMilli()}
			if i%4 == 0 {
				if err := e.prod.ProduceSync(ctx, &kgo.Record{Topic: e.topic, Key: []byte(item), Value: schemas.AppendLike(nil, l)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		e.waitLog(t, ctx)
		time.Sleep(time.Second) // for the applier to read it all and move its marks
	}
	changes(0)
	saved := e.dumpRedis(t, ctx)
	before := e.marks(t, ctx)
	changes(1)
	after := e.marks(t, ctx)
	if !slices.ContainsFunc([]int32{0, 1, 2, 3}, func(p int32) bool { return after[p] > before[p] }) {
		t.Fatalf("got marks %v after the second round, %v before; want some moved, so that the copy lacks changes", after, before)
	}
	rebuilds := testutil.ToFloat64(e.applier.rebuilds)
	e.restoreRedis(t, ctx, saved)
	t0 := time.Now()
	e.waitLog(t, ctx)
	t.Logf("the lost changes were applied again %s after the failover", time.Since(t0).Round(10*time.Millisecond))
	if n := testutil.ToFloat64(e.applier.rewinds); n == 0 {
		t.Errorf("got %v partitions read again; want the applier to have found the marks behind", n)
	}
	if n := testutil.ToFloat64(e.applier.rebuilds) - rebuilds; n != 0 {
		t.Errorf("got %v rebuilds after the failover; want none: the state came back with its ready marker", n)
	}
}

// A failover can lose a request's own change made after the applier's last mark and keep that
// mark: then nothing but the log says the change is missing, and the applier, which reads it
// there, must apply it rather than skip it as applied by the request.
func TestApplierRestoresARequestChangeAFailoverLost(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "failover_request")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deadline := time.Now().Add(30 * time.Second)
	changes := func(liked bool) {
		t.Helper()
		for i := range 3 {
			if _, err := change(e.client, e.srv.URL, "item", fmt.Sprintf("user%d", i), liked, deadline); err != nil {
				t.Fatal(err)
			}
		}
	}
	changes(true)
	e.waitLog(t, ctx)
	time.Sleep(time.Second) // for the applier to move its marks past them
	saved := e.dumpRedis(t, ctx)
	changes(false)
	e.restoreRedis(t, ctx, saved) // within applierDelay: the applier has not read them yet
	e.waitLog(t, ctx)
}

// marks reads the applied marks of the test topic's 4 partitions (-1: none).
func (e *env) marks(t *testing.T, ctx context.Context) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	for p := range int32(4) {
		v, err := e.rdb.Get(ctx, likestate.AppliedKey(p)).Int64()
		if errors.Is(err, redis.Nil) {
			v, err = -1, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		out[p] = v
	}
	return out
}

// waitLog waits until Redis equals the log.
func (e *env) waitLog(t *testing.T, ctx context.Context) {
	t.Helper()
	want := logState(t, e.topic)
	testinfra.WaitFor(t, 15*time.Second, "like state equal to the log", func() (bool, string) {
		d, err := diffState(ctx, e.store, want)
		return err == nil && d == "", d + " " + errString(err)
	})
}

// dumpRedis copies every key of the test Redis.
func (e *env) dumpRedis(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	keys, err := e.rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if out[k], err = e.rdb.Dump(ctx, k).Result(); err != nil {
			t.Fatalf("dump %s: %v", k, err)
		}
	}
	return out
}

// restoreRedis replaces the test Redis's keys with saved in one transaction, as a promoted
// replica replaces the state at once: an applier seeing Redis half restored (ReadyKey not yet
// back) would rebuild it from the log, and the rest of the restore would then overwrite parts
// of the rebuilt state, marks included, which no failover does.
func (e *env) restoreRedis(t *testing.T, ctx context.Context, saved map[string]string) {
	t.Helper()
	_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushAll(ctx)
		for k, v := range saved {
			p.RestoreReplace(ctx, k, 0, v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("restore %d keys: %v", len(saved), err)
	}
}

// Redis loses its data at random ones of the like state's Redis calls (the request path's
// scripts, the applier's batches, a rebuild from the log under way), twice a round, round after
// round, while changes go through the API, each retried until acknowledged (503 while the
// state is rebuilt); after each round the state equals the log within a few CheckEvery. The
// seed is logged.
func TestLikeStateSurvivesALossAnywhere(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "loss")
	flusher := redisclient.Open(infra.Redis.Addr())
	defer flusher.Close()
	loss := testinfra.FlushAllWith(flusher)
	e.rdb.AddHook(loss)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	losses, calls := 0, int64(60)
	const rounds = 6
	for round := range rounds {
		// Two losses at calls among as many as the last round made.
		loss.Arm(1+rng.Int64N(calls), 1+rng.Int64N(calls))
		deadline := time.Now().Add(30 * time.Second)
		for range 30 {
			item, user := fmt.Sprintf("item%d", rng.IntN(5)), fmt.Sprintf("user%d", rng.IntN(20))
			if _, err := change(e.client, e.srv.URL, item, user, rng.IntN(3) != 0, deadline); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		lost, n := loss.Arm()
		calls = max(n, 1)
		if lost {
			losses++
		}
		e.waitLog(t, ctx)
	}
	if losses == 0 {
		t.Fatal("got no round in which redis lost its data; want some (the armed calls never came)")
	}
	t.Logf("%d of %d rounds lost redis's data", losses, rounds)
}
