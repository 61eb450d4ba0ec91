package likes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// A Redis failover to a replica that had not received the last writes loses changes the old
// primary acknowledged: the request path's own and the applier's, with ReadyKey still set.
// The test stands the promoted replica in with a copy of Redis taken earlier (DUMP, then
// FLUSHALL and RESTORE after more changes) and wants the state back equal to the log within a
// few CheckEvery, from the applied marks, without a rebuild.
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
	changes(1)
	e.restoreRedis(t, ctx, saved)
	if d, _ := diffState(ctx, e.store, logState(t, e.topic)); d == "" {
		t.Fatal("got the restored copy equal to the log; want it to lack the second round's changes")
	}
	t0 := time.Now()
	e.waitLog(t, ctx)
	t.Logf("the lost changes were applied again %s after the failover", time.Since(t0).Round(10*time.Millisecond))
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

// restoreRedis replaces the test Redis's keys with saved.
func (e *env) restoreRedis(t *testing.T, ctx context.Context, saved map[string]string) {
	t.Helper()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range saved {
		if err := e.rdb.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			t.Fatalf("restore %s: %v", k, err)
		}
	}
}
