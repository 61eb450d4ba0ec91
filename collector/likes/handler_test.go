package likes

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

func TestRejectsBadIDs(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "badids")
	tests := []struct {
		name, method, path string
		wantField          string
	}{
		{"like bad item", http.MethodPut, "/v1/items/a%2Fb/likes/u1", "item_id"},
		{"unlike bad user", http.MethodDelete, "/v1/items/i1/likes/u%20x", "user_id"},
		{"user too long", http.MethodPut, "/v1/items/i1/likes/" + strings.Repeat("u", 129), "user_id"},
		{"liked-by bad user", http.MethodGet, "/v1/users/u%21/likes?ids=a", "user_id"},
		{"liked-by no ids", http.MethodGet, "/v1/users/u1/likes", "ids"},
		{"liked-by bad id", http.MethodGet, "/v1/users/u1/likes?ids=a,b%24", "ids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, err := do(e.client, tt.method, e.srv.URL+tt.path)
			if err != nil {
				t.Fatal(err)
			}
			var got struct{ Error, Field string }
			_ = json.Unmarshal(body, &got)
			if code != http.StatusBadRequest || got.Field != tt.wantField || !strings.HasPrefix(got.Error, tt.wantField) {
				t.Fatalf("got %d %s; want 400 naming field %s", code, body, tt.wantField)
			}
		})
	}
	if n := len(logState(t, e.topic)); n != 0 {
		t.Errorf("got %d items in the log after rejected requests; want 0", n)
	}
}

func TestLikeUnlikeAreIdempotent(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "idem")
	deadline := time.Now().Add(10 * time.Second)
	steps := []struct {
		name      string
		user      string
		liked     bool
		wantLiked bool
		wantTotal int64
	}{
		{"first like", "u1", true, true, 1},
		{"double tap changes nothing", "u1", true, true, 1},
		{"second user", "u2", true, true, 2},
		{"unlike", "u1", false, false, 1},
		{"unlike retried", "u1", false, false, 1},
		{"unlike of a user who never liked stays at zero", "u3", false, false, 1},
		{"last unlike", "u2", false, false, 0},
		{"below zero impossible", "u2", false, false, 0},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			got, err := change(e.client, e.srv.URL, "item-1", s.user, s.liked, deadline)
			if err != nil {
				t.Fatal(err)
			}
			want := ChangeResponse{ItemID: "item-1", UserID: s.user, Liked: s.wantLiked, Likes: s.wantTotal}
			if got != want {
				t.Fatalf("got %+v; want %+v", got, want)
			}
		})
	}
	if _, err := change(e.client, e.srv.URL, "item-2", "u1", true, deadline); err != nil {
		t.Fatal(err)
	}
	code, body, err := do(e.client, http.MethodGet, e.srv.URL+"/v1/users/u1/likes?ids=item-1,item-2,item-3")
	if err != nil {
		t.Fatal(err)
	}
	var got LikedByResponse
	if err := json.Unmarshal(body, &got); err != nil || code != http.StatusOK {
		t.Fatalf("got %d %s; want 200", code, body)
	}
	want := map[string]bool{"item-1": false, "item-2": true, "item-3": false}
	if got.UserID != "u1" || len(got.Liked) != len(want) {
		t.Fatalf("got %+v; want user u1 with %v", got, want)
	}
	for it, w := range want {
		if got.Liked[it] != w {
			t.Errorf("liked[%s]: got %v; want %v", it, got.Liked[it], w)
		}
	}
	totals, err := e.store.Totals(context.Background(), []string{"item-1", "item-2", "item-3"})
	if err != nil {
		t.Fatal(err)
	}
	if totals["item-1"] != 0 || totals["item-2"] != 1 || totals["item-3"] != 0 {
		t.Errorf("got totals %v; want item-1 0, item-2 1, item-3 0", totals)
	}
}

// A change that reached the log but not Redis (the process died in between) is applied by the
// applier without any request.
func TestApplierRepairsChangeOnlyInLog(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "repair")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, l := range []schemas.Like{
		{ItemID: "it", UserID: "a", Liked: true, TS: time.Now().UnixMilli()},
		{ItemID: "it", UserID: "b", Liked: true, TS: time.Now().UnixMilli()},
		{ItemID: "it", UserID: "a", Liked: false, TS: time.Now().UnixMilli()},
	} {
		if err := e.prod.ProduceSync(ctx, &kgo.Record{Topic: e.topic, Key: []byte(l.ItemID), Value: schemas.AppendLike(nil, l)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	testinfra.WaitFor(t, 10*time.Second, "applier applied the log", func() (bool, string) {
		d, err := diffState(ctx, e.store, map[string]map[string]bool{"it": {"a": false, "b": true}})
		return err == nil && d == "", d + " " + errString(err)
	})
}

// Redis down: 503 with a clear message, and nothing reaches the log.
func TestRedisDownAnswers503(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "redisdown")
	dead, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	rdb := redisclient.Open(dead)
	defer rdb.Close()
	down := likestate.NewStore(rdb)
	mux := http.NewServeMux()
	NewHandler(HandlerOptions{Store: down, Producer: e.prod, Topic: e.topic, ProduceTimeout: 5 * time.Second, Now: time.Now, Logger: testLogger()}).Register(api.NewRouter(mux, prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer e.client.CloseIdleConnections()
	for _, tt := range []struct{ method, path string }{
		{http.MethodPut, "/v1/items/i/likes/u"},
		{http.MethodDelete, "/v1/items/i/likes/u"},
		{http.MethodGet, "/v1/users/u/likes?ids=i"},
	} {
		t.Run(tt.method, func(t *testing.T) {
			code, body, err := do(e.client, tt.method, srv.URL+tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "redis) is unavailable") {
				t.Fatalf("got %d %s; want 503 saying redis is unavailable", code, body)
			}
		})
	}
	if n := len(logState(t, e.topic)); n != 0 {
		t.Errorf("got %d items in the log; want none while redis is down", n)
	}
}

// A readiness check stands for later changes for a moment, but the first change that finds
// Redis unable to take it ends that: the next change checks again and stays out of the log.
func TestReadyCheckReuseEndsAtFirstFailure(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "readyreuse")
	frozen := time.Now() // the reuse never runs out on this clock
	mux := http.NewServeMux()
	NewHandler(HandlerOptions{Store: e.store, Producer: e.prod, Topic: e.topic, ProduceTimeout: 5 * time.Second, Now: func() time.Time { return frozen }, Logger: testLogger()}).Register(api.NewRouter(mux, prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	put := func() (int, string) {
		code, body, err := do(e.client, http.MethodPut, srv.URL+"/v1/items/i/likes/u")
		if err != nil {
			t.Fatal(err)
		}
		return code, string(body)
	}
	if code, body := put(); code != http.StatusOK {
		t.Fatalf("got %d %s; want 200", code, body)
	}
	if err := e.rdb.Del(context.Background(), likestate.ReadyKey).Err(); err != nil {
		t.Fatal(err)
	}
	// Reuses the check: logged, then refused by the apply script.
	if code, body := put(); code != http.StatusServiceUnavailable || !strings.Contains(body, "this change is recorded") {
		t.Fatalf("got %d %s; want 503 saying the change is recorded", code, body)
	}
	// Checks again: not logged. (The applier may have rebuilt the state already: then 200.)
	if code, body := put(); code != http.StatusOK && (code != http.StatusServiceUnavailable || strings.Contains(body, "recorded")) {
		t.Fatalf("got %d %s; want 503 without the change recorded, or 200 after a rebuild", code, body)
	}
}

// Redis comes back empty (FLUSHALL, and its script cache gone too): likes answer 503 until the
// appliers rebuilt the state from the log, and then every state and total is exact. Two
// appliers (two collectors) see the loss at once; one rebuilds, the other waits for it.
func TestRebuildAfterFlushAll(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "flush")
	second, err := NewApplier(ApplierConfig{Log: likestate.Log{Brokers: []string{infra.Kafka.Addr()}, Topic: e.topic, Group: "applier-flush-2"},
		CheckEvery: 200 * time.Millisecond}, e.store, testLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	second.Start()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := second.Stop(sctx); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	items := []string{"p", "q", "r"}
	for i := range 60 {
		if _, err := change(e.client, e.srv.URL, items[i%3], "user-"+string(rune('a'+i%17)), i%4 != 3, deadline); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ method, path string }{
		{http.MethodPut, "/v1/items/p/likes/late"},
		{http.MethodGet, "/v1/users/user-a/likes?ids=p,q,r"},
	} {
		code, body, err := do(e.client, tt.method, e.srv.URL+tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "being rebuilt from the log") {
			t.Fatalf("%s %s right after FLUSHALL: got %d %s; want 503 saying the state is being rebuilt", tt.method, tt.path, code, body)
		}
	}
	if _, err := e.store.Totals(ctx, items); !errors.Is(err, likestate.ErrNotReady) {
		t.Fatalf("Totals right after FLUSHALL: got %v; want likestate.ErrNotReady", err)
	}
	// Read now: the PUT above may have reached the log (within readyFor of the last good
	// readiness check) and is then part of what the rebuild restores.
	want := logState(t, e.topic)
	e.waitRebuilt(t, ctx, "p", want)
	// Changes are applied again, on top of the rebuilt state.
	got, err := change(e.client, e.srv.URL, "p", "late", true, deadline)
	if err != nil {
		t.Fatal(err)
	}
	wantTotal := countLiked(want["p"])
	if !want["p"]["late"] {
		wantTotal++
	}
	if !got.Liked || got.Likes != wantTotal {
		t.Fatalf("like after the rebuild: got %+v; want liked with %d likes", got, wantTotal)
	}
}

// A Redis holding the previous layout (layout 3: each item's keys spread over its shards' hash
// tags, the previous marker and applied marks) is rebuilt on its own: the replay writes the
// current layout's keys, and the totals then agree with the log.
func TestRebuildUpgradesLayout(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	e := newEnv(t, "upgrade")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	items := []string{"s", "t"}
	for i := range 40 {
		if _, err := change(e.client, e.srv.URL, items[i%2], "user-"+string(rune('a'+i%13)), i%5 != 4, deadline); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := e.rdb.Keys(ctx, "{likes}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Give every key its layout-3 name (likes:{item:k}:users, likes:{item:k}:off,
	// likes:{item}:total, likes:ready:3, likes:applied:<p>), all in one MULTI so that the
	// applier never sees half of it.
	renames, renamed := map[string]string{}, 0
	for _, k := range keys {
		rest := strings.TrimPrefix(k, "{likes}:")
		var old string
		switch parts := strings.Split(rest, ":"); {
		case rest == "ready:4":
			old = "likes:ready:3"
		case rest == "rebuilding":
			old = "likes:rebuilding"
		case parts[0] == "applied":
			old = "likes:" + rest
		case len(parts) == 3 && (parts[2] == "users" || parts[2] == "off"):
			old = "likes:{" + parts[0] + ":" + parts[1] + "}:" + parts[2]
		case len(parts) == 2 && parts[1] == "total":
			old = "likes:{" + parts[0] + "}:total"
			renamed++
		default:
			t.Fatalf("key %q is not of the like layout", k)
		}
		renames[k] = old
	}
	if renamed != len(items) {
		t.Fatalf("got %d total keys in %v; want one per item", renamed, keys)
	}
	if _, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for k, old := range renames {
			p.Rename(ctx, k, old)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.waitRebuilt(t, ctx, "s", logState(t, e.topic))
}

// waitRebuilt waits until likes are served again, polling with reads of item only, then checks
// that the state served equals want: the first answer that is not a 503 must already be exact.
func (e *env) waitRebuilt(t *testing.T, ctx context.Context, item string, want map[string]map[string]bool) {
	t.Helper()
	testinfra.WaitFor(t, 20*time.Second, "likes served again", func() (bool, string) {
		code, body, err := do(e.client, http.MethodGet, e.srv.URL+"/v1/users/user-a/likes?ids="+item)
		return err == nil && code == http.StatusOK, string(body)
	})
	if d, err := diffState(ctx, e.store, want); err != nil || d != "" {
		t.Fatalf("state after the rebuild differs from the log:\n%s %v", d, err)
	}
}

func countLiked(m map[string]bool) int64 {
	var n int64
	for _, l := range m {
		if l {
			n++
		}
	}
	return n
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
