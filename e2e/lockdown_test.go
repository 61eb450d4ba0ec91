package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/allinone/allinonetest"
	"github.com/tallypipeline/tally/devstack/embedded"
	"github.com/tallypipeline/tally/platform/chclient"
)

// outsideBound is how long the pipeline's own work may wait behind one outside query: the
// dashboards user's max_execution_time (3 s by default) plus a block and the machine's noise.
const outsideBound = 6 * time.Second

// coldReadBound is how long a page read from ClickHouse may take at the client: the collector
// answers 503 once collector.fallback_timeout (1 s) has passed, and the answer then still has
// its way back to make.
const coldReadBound = time.Second + 200*time.Millisecond

// TestEmbeddedStackLockdown tries the embedded stack from outside, as an attacker on the same
// host or a careless dashboard user would, on the all-in-one with its defaults: the
// credentials file is the owner's alone, no anonymous caller gets anything, no outside user
// reaches a file or URL, and an outside query running its longest allowed time, back to back,
// neither delays a cold page read past 1 s nor stops counting for longer than outsideBound.
func TestEmbeddedStackLockdown(t *testing.T) {
	r := allinonetest.Start(t)
	ch := "http://" + r.Config.ClickHouse.Addr + "/"
	t.Run("credentials file mode 0600", func(t *testing.T) {
		info, err := os.Stat(filepath.Join(r.Config.DataDir, embedded.EnvFile))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("got %v, %v; want mode 0600", info, err)
		}
	})
	t.Run("anonymous refused", func(t *testing.T) {
		for _, sql := range []string{
			"DROP TABLE IF EXISTS tally.anything", "INSERT INTO tally.dead_letters (source) VALUES ('x')",
			"ALTER TABLE tally.views_by_second DELETE WHERE 1", "SYSTEM DROP DNS CACHE",
			"SELECT file('/etc/passwd')", "SELECT * FROM url('http://127.0.0.1:1/', LineAsString)",
			"SELECT 1 SETTINGS max_execution_time = 0",
		} {
			for _, method := range []string{"GET", "POST"} {
				if code, body := chQuery(t, method, ch, "", sql); code != http.StatusUnauthorized {
					t.Errorf("anonymous %s %q: got %d %s; want 401", method, sql, code, body)
				}
			}
		}
	})
	t.Run("dashboards reach no file or URL", func(t *testing.T) {
		for _, sql := range []string{
			"SELECT “file”('/proc/self/environ')", "SELECT `fil\\x65`('/etc/passwd')", "SELECT file\u00a0('/etc/passwd')",
			"SELECT * FROM “file”('/etc/passwd', 'LineAsString')", "SELECT * FROM url('http://127.0.0.1:1/', LineAsString)",
			"SELECT 1 INTO OUTFILE '" + filepath.Join(t.TempDir(), "x") + "'", "SELECT 1 SETTINGS max_execution_time = 0",
		} {
			if code, body := chQuery(t, "POST", ch, "dashboards", sql); code == http.StatusOK || strings.Contains(body, "root:") {
				t.Errorf("dashboards %q: got %d %s; want a refusal", sql, code, body)
			}
		}
	})
	t.Run("kafka refuses clients without its user", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		anon, err := kgo.NewClient(kgo.SeedBrokers(r.Config.Kafka.Brokers...), kgo.DefaultProduceTopic("views"))
		if err != nil {
			t.Fatal(err)
		}
		defer anon.Close()
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		if err := anon.ProduceSync(actx, &kgo.Record{Value: []byte("forged")}).FirstErr(); err == nil {
			t.Fatal("anonymous produce to the views topic: got no error; want it refused")
		}
		kc := kafkaConn{addr: r.Config.Kafka.Brokers[0], sec: r.Config.Kafka.Security()}
		cl, err := kc.client(slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.Ping(ctx); err != nil {
			t.Fatalf("ping as the broker's user: got %v; want it accepted", err)
		}
	})
	t.Run("outside queries stall neither reads nor counting", func(t *testing.T) { checkOutsideQueriesStallNothing(t, r) })
}

// chQuery sends sql to the embedded engine as user (no credentials if "") and returns the
// status and the start of the answer.
func chQuery(t *testing.T, method, ch, user, sql string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, ch+"?"+url.Values{"query": {sql}}.Encode(), nil)
	if user != "" {
		req.SetBasicAuth(user, "")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	return resp.StatusCode, string(b)
}

func checkOutsideQueriesStallNothing(t *testing.T, r *allinonetest.Running) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ch := "http://" + r.Config.ClickHouse.Addr + "/"
	// Queries that would run for minutes, each cut at the dashboards limit, back to back.
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		outside atomic.Int64
	)
	wg.Go(func() {
		for !stop.Load() {
			t0 := time.Now()
			code, body := chQuery(t, "POST", ch, "dashboards", "SELECT count() FROM numbers(1999999999) WHERE cityHash64(repeat(toString(number), 50)) = 0")
			if took := time.Since(t0); code != 500 || !strings.Contains(body, "TIMEOUT_EXCEEDED") || took < 2500*time.Millisecond {
				t.Errorf("outside query: got %d %q after %s; want it cut at its 3 s limit", code, body, took)
			}
			outside.Add(1)
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	time.Sleep(500 * time.Millisecond)

	// Redis loses its data: the totals are not ready, so pages fall back to ClickHouse.
	rdb := redis.NewClient(&redis.Options{Addr: r.Config.Redis.Addr, Password: r.Config.Redis.Password})
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	conn, err := chclient.Open(ctx, chclient.Options{Addr: r.Config.ClickHouse.Addr, Database: "tally", Username: r.Config.ClickHouse.Username, Password: r.Config.ClickHouse.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var slowest, slowestRead time.Duration
	for i := 0; i < 30 && (i < 8 || outside.Load() < 3); i++ {
		item := fmt.Sprintf("lockdown-%d", i)
		posted := time.Now()
		if code := post(t, r.API+"/v1/views", `{"item_id":"`+item+`","viewer_id":"v"}`); code != 202 {
			t.Fatalf("post view: got %d; want 202", code)
		}
		t0 := time.Now()
		resp, err := http.Get(r.API + "/v1/counts?ids=cold-" + item + ",cold2-" + item)
		read := time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if read > coldReadBound || resp.StatusCode != 200 && resp.StatusCode != 503 {
			t.Errorf("cold page read: got %d after %s; want 200 or 503 within %s", resp.StatusCode, read, coldReadBound)
		}
		slowestRead = max(slowestRead, read)
		for {
			var n uint64
			if err := conn.QueryRow(ctx, "SELECT sum(views) FROM views_by_second WHERE item_id = ?", item).Scan(&n); err == nil && n == 1 {
				break
			}
			if time.Since(posted) > 2*outsideBound {
				t.Fatalf("view of %s not counted after %s; want within %s", item, time.Since(posted), outsideBound)
			}
			// Polled less often than the engine's quiet time, or the poll itself would
			// keep the outside queries out.
			time.Sleep(250 * time.Millisecond)
		}
		slowest = max(slowest, time.Since(posted))
	}
	stop.Store(true)
	wg.Wait()
	if n := outside.Load(); n < 3 {
		t.Fatalf("got %d outside queries during the probes; want at least 3", n)
	}
	if slowest > outsideBound {
		t.Errorf("slowest view to be counted: %s; want within %s while outside queries run", slowest, outsideBound)
	}
	t.Logf("%d outside queries of 3 s; slowest cold page read %s, slowest view counted after %s", outside.Load(), slowestRead, slowest)
}
