package likes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/platform/redisclient"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The test binary shares one infrastructure (chDB allows one engine per process). Tests run
// one at a time: the like state's Redis keys are global (likestate.ReadyKey), so each test starts
// from FLUSHALL and uses its own topic and consumer group.
var (
	infra        *testinfra.Infra
	collectorBin string // the collector binary, for the crash test
)

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error {
		infra = in
		var err error
		collectorBin, err = testinfra.Build(in.Dir, "github.com/tallypipeline/tally/collector/cmd/collector")
		return err
	}))
}

func testLogger() *slog.Logger { return infra.Logger }

// env is one test's likes stack in this process: producer, store, handler behind an HTTP
// server, and applier, on its own topic and group.
type env struct {
	t       testing.TB
	topic   string
	prod    *kgo.Client
	rdb     *redis.Client
	store   *likestate.Store
	applier *Applier
	srv     *httptest.Server
	client  *http.Client
}

func newEnv(t testing.TB, name string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	flushRedis(t)
	e := &env{t: t, topic: "likes-" + name}
	var err error
	e.prod = infra.Producer(t, e.topic, 4)
	reg := prometheus.NewRegistry()
	e.rdb = redisclient.Open(infra.Redis.Addr())
	e.store = likestate.NewStore(e.rdb)
	mux := http.NewServeMux()
	NewHandler(HandlerOptions{Store: e.store, Producer: e.prod, Topic: e.topic, ProduceTimeout: 10 * time.Second, Now: time.Now, Logger: testLogger()}).Register(api.NewRouter(mux, reg))
	e.srv = httptest.NewServer(mux)
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}, Timeout: 15 * time.Second}
	e.applier, err = NewApplier(ApplierConfig{Log: likestate.Log{Brokers: []string{infra.Kafka.Addr()}, Topic: e.topic, Group: "applier-" + name},
		CheckEvery: 200 * time.Millisecond}, e.store, testLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	e.applier.Start()
	t.Cleanup(e.close)
	testinfra.WaitFor(t, 20*time.Second, "like state ready", func() (bool, string) {
		ok, err := e.store.Ready(ctx)
		return ok, fmt.Sprint(err)
	})
	return e
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.applier.Stop(ctx); err != nil {
		e.t.Errorf("stop applier: %v", err)
	}
	e.srv.Close()
	e.client.CloseIdleConnections()
	e.rdb.Close()
}

// do sends one request and returns the status and body; err is a transport error.
func do(c *http.Client, method, url string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// change likes (or unlikes) until it gets a 200, retrying 503s and transport errors until
// deadline, and returns the answer.
func change(c *http.Client, base, item, user string, liked bool, deadline time.Time) (ChangeResponse, error) {
	method := http.MethodPut
	if !liked {
		method = http.MethodDelete
	}
	url := base + "/v1/items/" + item + "/likes/" + user
	for {
		code, body, err := do(c, method, url)
		if err == nil && code == http.StatusOK {
			var r ChangeResponse
			if err := json.Unmarshal(body, &r); err != nil {
				return r, fmt.Errorf("decode %s: %w", body, err)
			}
			return r, nil
		}
		if err == nil && code != http.StatusServiceUnavailable {
			return ChangeResponse{}, fmt.Errorf("%s %s: got %d %s; want 200 or 503", method, url, code, body)
		}
		if time.Now().After(deadline) {
			return ChangeResponse{}, fmt.Errorf("%s %s: no 200 before the deadline (last: %d %s %v)", method, url, code, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logState is the oracle: the last state of every (item, user) pair in log order.
func logState(t testing.TB, topic string) map[string]map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]map[string]bool{}
	last := map[[2]string]int64{}
	_, _, err := likestate.Replay(ctx, []string{infra.Kafka.Addr()}, topic, testLogger(), func(recs []likestate.Record) error {
		for _, r := range recs {
			k := [2]string{r.Like.ItemID, r.Like.UserID}
			if off, ok := last[k]; ok && off >= r.Offset {
				return fmt.Errorf("offsets of %v not increasing: %d after %d", k, r.Offset, off)
			}
			last[k] = r.Offset
			if out[r.Like.ItemID] == nil {
				out[r.Like.ItemID] = map[string]bool{}
			}
			out[r.Like.ItemID][r.Like.UserID] = r.Like.Liked
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the like log: %v", err)
	}
	return out
}

// diffState compares Redis with the oracle: every pair's membership, every item's total, and
// each total key with its sets.
// It returns a description of the first differences, or "" when they agree.
func diffState(ctx context.Context, store *likestate.Store, want map[string]map[string]bool) (string, error) {
	items := make([]string, 0, len(want))
	for it := range want {
		items = append(items, it)
	}
	sort.Strings(items)
	got, err := store.ItemStates(ctx, items)
	if err != nil {
		return "", err
	}
	totals, err := store.Totals(ctx, items)
	if err != nil {
		return "", err
	}
	var diffs []string
	for _, it := range items {
		wantTotal := int64(0)
		for user, liked := range want[it] {
			if liked {
				wantTotal++
			}
			if got[it].Pairs[user].Liked != liked {
				diffs = append(diffs, fmt.Sprintf("%s/%s: got liked=%v; want %v", it, user, got[it].Pairs[user].Liked, liked))
			}
		}
		for user, st := range got[it].Pairs {
			if _, ok := want[it][user]; !ok && st.Liked {
				diffs = append(diffs, fmt.Sprintf("%s/%s: got liked=true; want no state (not in the log)", it, user))
			}
		}
		if totals[it] != wantTotal {
			diffs = append(diffs, fmt.Sprintf("%s total: got %d; want %d", it, totals[it], wantTotal))
		}
		if got[it].Total != got[it].Liked {
			diffs = append(diffs, fmt.Sprintf("%s total key: got %d; want the sets' %d users", it, got[it].Total, got[it].Liked))
		}
	}
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
	}
	return strings.Join(diffs, "\n"), nil
}

func flushRedis(t testing.TB) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: infra.Redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
}
