package collector

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/collectorconf"
	"github.com/tallypipeline/tally/platform/cli"
	"github.com/tallypipeline/tally/platform/config"
	"github.com/tallypipeline/tally/platform/lifecycle"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// The test binary shares one infrastructure (chDB allows one engine per process); each test runs
// a whole collector against it, one at a time.
var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

// startCollector runs the collector's parts with the settings in args (and the test
// infrastructure's addresses) until the test ends, and returns its API and admin base URLs once
// its parts have started.
func startCollector(t *testing.T, args ...string) (api, admin string) {
	t.Helper()
	apiAddr, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	adminAddr, err := testinfra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	var s collectorconf.Settings
	defaults := []string{"--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword,
		"--redis.addr", infra.Redis.Addr(), "--collector.addr", apiAddr, "--collector.admin_addr", adminAddr,
		"--kafka.partitions", "2", "--data_dir", t.TempDir()}
	if !slices.Contains(args, "--kafka.brokers") { // a list flag: given twice, it holds both
		defaults = append(defaults, "--kafka.brokers", infra.Kafka.Addr())
	}
	cfg, err := config.Load("collector", append(defaults, args...), s.Sections()...)
	if err != nil {
		t.Fatal(err)
	}
	runner := lifecycle.NewRunner(infra.Logger)
	parts, _ := Parts(cli.Env{Config: &cfg, Logger: infra.Logger, Registry: prometheus.NewRegistry(), Runner: runner, Now: time.Now}, &s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, 20*time.Second, parts...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector run: %v", err)
		}
	})
	testinfra.WaitFor(t, 60*time.Second, "collector started", func() (bool, string) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("collector stopped while starting: %v", err)
		default:
		}
		return runner.Ready(), "not started"
	})
	return "http://" + apiAddr, "http://" + adminAddr
}

// collector is startCollector and waits for /readyz (on the admin address when auth is on),
// which also waits for the like state rebuilt from the log: until then counts and likes answer
// 503.
func collector(t *testing.T, args ...string) (api, admin string) {
	t.Helper()
	api, admin = startCollector(t, args...)
	testinfra.WaitFor(t, 60*time.Second, "collector ready", func() (bool, string) {
		for _, base := range []string{api, admin} {
			if resp, err := http.Get(base + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return true, ""
				}
			}
		}
		return false, "/readyz not 200"
	})
	return api, admin
}

// call sends one request and returns its answer's status and body. A body goes as JSON unless
// header gives its Content-Type; header's "Host" replaces the request's Host.
func call(t *testing.T, method, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With auth on, the real collector refuses requests without a key or scope, serves them with
// one, takes a like's user from the token, and serves /metrics only on the admin address.
func TestAuthOn(t *testing.T) {
	const (
		producer = "tally_producer-secret-for-the-collector-test"
		app      = "tally_app-secret-for-the-collector-test-0000"
		admin    = "tally_admin-secret-for-the-collector-test-00"
		tight    = "tally_tight-secret-for-the-collector-test-00"
		tokenKey = "collector-test-user-token-key-0123456789"
	)
	keys := strings.Join([]string{
		"producer:" + auth.HashSecret(producer) + ":ingest:1000:1000",
		"app:" + auth.HashSecret(app) + ":read+like:1000:1000",
		"admin:" + auth.HashSecret(admin) + ":admin:1000:1000",
		"tight:" + auth.HashSecret(tight) + ":read:0.01:1", // one request, then one per 100 s
	}, ",")
	api, adm := collector(t, "--collector.auth.enabled", "on", "--collector.auth.keys", keys, "--collector.auth.user_token_key", tokenKey,
		"--debug.pprof")
	u42, err := auth.MintUserToken([]byte(tokenKey), "u42", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	view := `{"item_id":"auth-post","viewer_id":"v1"}`
	tests := []struct {
		name, method, url, body string
		header                  map[string]string
		want                    int
		wantIn                  string
	}{
		{"view without a key", "POST", api + "/v1/views", view, nil, 401, "X-API-Key"},
		{"view with a read key", "POST", api + "/v1/views", view, map[string]string{"X-API-Key": app}, 403, "ingest"},
		{"view with the producer key", "POST", api + "/v1/views", view, map[string]string{"X-API-Key": producer}, 202, `"accepted":1`},
		{"counts without a key", "GET", api + "/v1/counts?ids=auth-post", "", nil, 401, "X-API-Key"},
		{"counts with the app key", "GET", api + "/v1/counts?ids=auth-post", "", map[string]string{"X-API-Key": app}, 200, "auth-post"},
		{"like as the token's user", "PUT", api + "/v1/items/auth-post/likes/u42", "", map[string]string{"X-API-Key": app, "Authorization": "Bearer " + u42}, 200, `"liked":true`},
		{"like as another user", "PUT", api + "/v1/items/auth-post/likes/u7", "", map[string]string{"X-API-Key": app, "Authorization": "Bearer " + u42}, 403, "another user"},
		{"like without a token", "PUT", api + "/v1/items/auth-post/likes/u42", "", map[string]string{"X-API-Key": app}, 401, "user token"},
		{"health stays public", "GET", api + "/healthz", "", nil, 200, "ok"},
		{"metrics not on the API without a key", "GET", api + "/metrics", "", nil, 401, "X-API-Key"},
		{"metrics not on the API even for admin", "GET", api + "/metrics", "", map[string]string{"X-API-Key": admin}, 404, ""},
		{"metrics on the admin address", "GET", adm + "/metrics", "", nil, 200, `tally_auth_requests_total{key="producer",outcome="ok"} 1`},
		{"health on the admin address", "GET", adm + "/readyz", "", nil, 200, "ready"},
		{"pprof not on the API", "GET", api + "/debug/pprof/", "", map[string]string{"X-API-Key": admin}, 404, ""},
		{"pprof on the admin address", "GET", adm + "/debug/pprof/", "", nil, 200, "goroutine"},
		{"first request of a tight key", "GET", api + "/v1/counts?ids=auth-post", "", map[string]string{"X-API-Key": tight}, 200, "auth-post"},
		{"second request of a tight key", "GET", api + "/v1/counts?ids=auth-post", "", map[string]string{"X-API-Key": tight}, 429, "rate limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, tt.method, tt.url, tt.body, tt.header)
			if code != tt.want || !strings.Contains(body, tt.wantIn) {
				t.Errorf("got %d %.300s; want %d containing %q", code, body, tt.want, tt.wantIn)
			}
		})
	}
}

// With auth off (the loopback all-in-one's default) nothing changes for clients: no key, and
// /metrics beside the API; the admin address is not opened.
func TestAuthOffOnLoopback(t *testing.T) {
	api, adm := collector(t)
	for _, tt := range []struct {
		name, method, url, body string
		want                    int
	}{
		{"view without a key", "POST", api + "/v1/views", `{"item_id":"open-post","viewer_id":"v1"}`, 202},
		{"like without a token", "PUT", api + "/v1/items/open-post/likes/u42", "", 200},
		{"metrics on the API address", "GET", api + "/metrics", "", 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := call(t, tt.method, tt.url, tt.body, nil); code != tt.want {
				t.Errorf("got %d %.300s; want %d", code, body, tt.want)
			}
		})
	}
	if _, err := http.Get(adm + "/metrics"); err == nil {
		t.Errorf("got an answer on the admin address %s with auth off; want nothing listening", adm)
	}
}

// The collector binary refuses to start on an address reachable from the network without
// access control, saying which setting to change, before it opens anything.
func TestPublicAddressWithoutAuthRefused(t *testing.T) {
	bin, err := testinfra.Build(t.TempDir(), "github.com/tallypipeline/tally/collector/cmd/collector")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"auto on all interfaces, no keys", []string{"--collector.addr", "0.0.0.0:0"}, "config: collector.auth.keys: is empty but auth is on"},
		{"auth off on all interfaces", []string{"--collector.addr", "0.0.0.0:0", "--collector.auth.enabled", "off"}, "config: collector.auth.enabled: is off but collector.addr \"0.0.0.0:0\" is not a loopback address"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"--kafka.brokers", infra.Kafka.Addr(), "--clickhouse.addr", infra.ClickHouse.Addr(), "--clickhouse.password", testinfra.ClickHousePassword,
				"--redis.addr", infra.Redis.Addr(), "--data_dir", t.TempDir()}, tt.args...)...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tt.want) {
				t.Errorf("got %v %s; want exit status 2 saying %q", err, out, tt.want)
			}
		})
	}
}
