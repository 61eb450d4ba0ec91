package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/allinone/allinonetest"
	"github.com/tallypipeline/tally/platform/chclient"
)

// The embedded Redis killed with SIGKILL comes back empty within seconds, and so do likes,
// liked-by and counts: the likes applier rebuilds the like state from the log, the counts
// refill from ClickHouse.
func TestRedisKilledRecovers(t *testing.T) {
	r := allinonetest.Start(t)
	api := r.API
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	like := func(user string) int {
		req, _ := http.NewRequest(http.MethodPut, api+"/v1/items/sup-item/likes/"+user, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	type counts struct {
		Views uint64 `json:"views"`
		Likes int64  `json:"likes"`
	}
	read := func() (int, counts) {
		var c counts
		resp, err := http.Get(api + "/v1/items/sup-item/counts")
		if err != nil {
			return 0, c
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&c)
		return resp.StatusCode, c
	}
	likedBy := func(user string) (int, bool) {
		var body struct{ Liked map[string]bool }
		resp, err := http.Get(api + "/v1/users/" + user + "/likes?ids=sup-item")
		if err != nil {
			return 0, false
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Liked["sup-item"]
	}
	waitFor(t, 20*time.Second, "first like", func() bool { return like("u1") == 200 })
	if code := post(t, api+"/v1/views", `{"item_id":"sup-item","viewer_id":"v1"}`); code != 202 {
		t.Fatalf("POST /v1/views: got %d; want 202", code)
	}
	waitFor(t, 20*time.Second, "the view and the like counted", func() bool {
		code, c := read()
		return code == 200 && c == counts{Views: 1, Likes: 1}
	})

	rdb := redis.NewClient(&redis.Options{Addr: r.Config.Redis.Addr, Password: r.Config.Redis.Password})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("no process_id in INFO server: %q", info)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	waitFor(t, 15*time.Second, "a like accepted after the kill", func() bool { return like("u2") == 200 })
	waitFor(t, 15*time.Second, "counts after the kill", func() bool {
		code, c := read()
		return code == 200 && c == counts{Views: 1, Likes: 2}
	})
	waitFor(t, 15*time.Second, "liked-by after the kill", func() bool {
		code, liked := likedBy("u1")
		return code == 200 && liked
	})
	t.Logf("likes, counts and liked-by back %s after the kill", time.Since(t0).Round(time.Millisecond))
	resp, err := http.Get(api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("readyz after recovery: got %d; want 200", resp.StatusCode)
	}
}

// A rollup table dropped by hand under a running pipeline is re-created (the migrations stay
// recorded as applied) and counting goes on; /readyz names every dependency it checks.
func TestDroppedTableRecovers(t *testing.T) {
	r := allinonetest.Start(t)
	api := r.API
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	views := func(item string) (int, uint64) {
		var c struct{ Views uint64 }
		resp, err := http.Get(api + "/v1/items/" + item + "/counts")
		if err != nil {
			return 0, 0
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&c)
		return resp.StatusCode, c.Views
	}
	if code := post(t, api+"/v1/views", `{"item_id":"drop-a","viewer_id":"v1"}`); code != 202 {
		t.Fatalf("POST /v1/views: got %d; want 202", code)
	}
	waitFor(t, 20*time.Second, "the first view counted", func() bool { code, n := views("drop-a"); return code == 200 && n == 1 })
	conn, err := chclient.Open(ctx, chclient.Options{Addr: r.Config.ClickHouse.Addr, Database: "tally", Username: r.Config.ClickHouse.Username, Password: r.Config.ClickHouse.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The table the all-time totals are summed from (views_total is a view over it).
	if err := conn.Exec(ctx, "DROP TABLE views_total_by_day"); err != nil {
		t.Fatal(err)
	}
	if code := post(t, api+"/v1/views", `{"item_id":"drop-b","viewer_id":"v1"}`); code != 202 {
		t.Fatalf("POST /v1/views: got %d; want 202", code)
	}
	waitFor(t, 30*time.Second, "a view after the drop counted", func() bool { code, n := views("drop-b"); return code == 200 && n == 1 })
	var total uint64
	waitFor(t, 30*time.Second, "the table re-created and the view's total in it", func() bool {
		return conn.QueryRow(ctx, "SELECT toUInt64(sum(views)) FROM views_total WHERE item_id = 'drop-b'").Scan(&total) == nil && total > 0
	})
	if total != 1 {
		t.Errorf("got all-time total %d over the re-created views_total_by_day; want 1", total)
	}

	var ready struct {
		Status string
		Checks []struct{ Name, Status string }
	}
	waitFor(t, 10*time.Second, "ready", func() bool {
		resp, err := http.Get(api + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&ready) == nil && resp.StatusCode == 200
	})
	var names []string
	for _, c := range ready.Checks {
		names = append(names, c.Name+" "+c.Status)
	}
	want := "aggregator clickhouse up,aggregator progress up,aggregator kafka up,aggregator clicks progress up,aggregator clicks kafka up,aggregator counters progress up,aggregator counters kafka up,topk published up,sink kafka up,collector clickhouse up,collector redis up,collector kafka up"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("got readiness checks %s; want %s", got, want)
	}
}
