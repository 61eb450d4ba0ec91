package chembed

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The shared test server runs with these: the pipeline user is "default"
// with a password (the engine refuses an administrator without one), the
// dashboards user has a password and a short max_execution_time.
const (
	pipePassword     = "pipe-test-secret"
	dashUser         = "dashboards"
	dashPassword     = "dash-secret"
	dashMaxExecution = 2 * time.Second
	testBodyTimeout  = 10 * time.Second
	testIdleTimeout  = 3 * time.Second
	testMaxOutside   = 4
	corsOrigin       = "https://dash.example"
)

// credentials say how a request authenticates.
type credentials struct {
	how        string // "basic", "headers", "params" or "" for none
	user, pass string
}

var (
	asPipeline   = credentials{how: "basic", user: "default", pass: pipePassword}
	asAnonymous  = credentials{}
	asDashboards = credentials{how: "basic", user: dashUser, pass: dashPassword}
)

// doAs sends one request to the shared server with the given credentials.
func doAs(t testing.TB, who credentials, method string, params url.Values, body string) (*http.Response, string) {
	t.Helper()
	params = cloneValues(params)
	header := http.Header{}
	switch who.how {
	case "params":
		params.Set("user", who.user)
		params.Set("password", who.pass)
	case "headers":
		header.Set("X-ClickHouse-User", who.user)
		header.Set("X-ClickHouse-Key", who.pass)
	case "basic":
		req, _ := http.NewRequest("GET", "/", nil)
		req.SetBasicAuth(who.user, who.pass)
		header.Set("Authorization", req.Header.Get("Authorization"))
	default:
		header.Set(anonymousHeader, "1")
	}
	return httpDo(t, method, params, body, header)
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

func TestAuthentication(t *testing.T) {
	tests := []struct {
		name   string
		who    credentials
		status int
	}{
		{"pipeline without password", asPipeline, 200},
		{"dashboards basic auth", asDashboards, 200},
		{"dashboards headers", credentials{"headers", dashUser, dashPassword}, 200},
		{"dashboards URL params", credentials{"params", dashUser, dashPassword}, 200},
		{"dashboards wrong password", credentials{"basic", dashUser, "guess"}, 403},
		{"dashboards wrong password in params", credentials{"params", dashUser, "guess"}, 403},
		{"dashboards no password", credentials{"headers", dashUser, ""}, 403},
		{"unknown user", credentials{"basic", "root", ""}, 403},
		{"pipeline with a password it does not have", credentials{"basic", "default", "x"}, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := doAs(t, tc.who, "POST", nil, "SELECT currentDatabase()")
			if resp.StatusCode != tc.status {
				t.Fatalf("status: got %d (%q); want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status != 200 {
				if got := resp.Header.Get("X-ClickHouse-Exception-Code"); got != "516" || !strings.Contains(body, "AUTHENTICATION_FAILED") {
					t.Fatalf("refusal: got code %q body %q; want code 516 AUTHENTICATION_FAILED", got, body)
				}
			}
		})
	}
	t.Run("two methods at once", func(t *testing.T) {
		resp, body := httpDo(t, "POST", vals("user", dashUser, "password", dashPassword), "SELECT 1",
			http.Header{"X-Clickhouse-User": {dashUser}, "X-Clickhouse-Key": {dashPassword}})
		if resp.StatusCode != 403 {
			t.Fatalf("status: got %d (%q); want 403", resp.StatusCode, body)
		}
	})
}

// TestOutsideClientsReachNoFilesOrNetwork replays the attacks of issue 13
// against the dashboards user and an anonymous caller: neither may read or
// write a local file or fetch a URL. (The pipeline user administers the
// engine and may; its password is readable by the data directory's owner
// only.)
func TestOutsideClientsReachNoFilesOrNetwork(t *testing.T) {
	var hits atomic.Int64
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "secret page\n")
	}))
	defer web.Close()
	db := newDatabase(t)
	if status, body := rawQuery(shared, "CREATE TABLE "+db+".lines (s String) ENGINE = MergeTree ORDER BY s"); status != 200 {
		t.Fatalf("create table: got %d %s", status, body)
	}
	dir := t.TempDir()
	attacks := []struct {
		name, sql string
		created   string // a file the attack would create
	}{
		{name: "file table function", sql: "SELECT * FROM file('/etc/passwd', 'LineAsString') LIMIT 1"},
		{name: "file table function, quoted name", sql: "SELECT * FROM `file`('/etc/passwd', 'LineAsString') LIMIT 1"},
		{name: "file scalar function", sql: "SELECT file('/etc/passwd')"},
		{name: "path as table", sql: "SELECT * FROM '/etc/passwd' LIMIT 1"},
		{name: "path as quoted table", sql: "SELECT * FROM default.`/etc/passwd` LIMIT 1"},
		{name: "url", sql: "SELECT * FROM url('" + web.URL + "/', 'LineAsString', 's String')"},
		{name: "URL upper case", sql: "SELECT * FROM URL('" + web.URL + "/', 'LineAsString', 's String')"},
		{name: "insert into function file", sql: "INSERT INTO FUNCTION file('" + filepath.Join(dir, "a.tsv") + "', 'TSV', 's String') VALUES ('pwned')", created: filepath.Join(dir, "a.tsv")},
		{name: "insert into table function", sql: "INSERT INTO TABLE FUNCTION null('s String') VALUES ('x')"},
		{name: "into outfile", sql: "SELECT 'pwned' INTO OUTFILE '" + filepath.Join(dir, "b.tsv") + "'", created: filepath.Join(dir, "b.tsv")},
		{name: "from infile", sql: "INSERT INTO " + db + ".lines FROM INFILE '/etc/passwd' FORMAT LineAsString"},
		{name: "file in VALUES data", sql: "INSERT INTO " + db + ".lines VALUES (file('/etc/passwd'))"},
		{name: "insert select from file", sql: "INSERT INTO " + db + ".lines SELECT * FROM file('/etc/passwd', 'LineAsString')"},
		{name: "File engine", sql: "CREATE TABLE " + db + ".f (s String) ENGINE = File(LineAsString, '/etc/passwd')"},
		{name: "URL engine", sql: "CREATE TABLE " + db + ".u (s String) ENGINE URL('" + web.URL + "/', LineAsString)"},
		{name: "Filesystem database", sql: "CREATE DATABASE " + db + "_fs ENGINE = Filesystem('/etc')"},
		{name: "file dictionary", sql: "CREATE DICTIONARY " + db + ".d (s String) PRIMARY KEY s SOURCE(FILE(path '/etc/passwd' format 'LineAsString')) LAYOUT(FLAT()) LIFETIME(0)"},
		{name: "template file", sql: "SELECT 1 FORMAT Template SETTINGS format_template_resultset = '/etc/passwd'"},
		{name: "local disk", sql: "CREATE TABLE " + db + ".dk (s String) ENGINE = MergeTree ORDER BY s SETTINGS disk = disk(type = 'local', path = '" + dir + "/')"},
		{name: "remote", sql: "SELECT * FROM remote('127.0.0.1:1', system.one)"},
		{name: "executable", sql: "SELECT * FROM executable('cat /etc/passwd', 'LineAsString', 's String')"},
		{name: "input", sql: "SELECT * FROM input('s String')"},
		{name: "system command", sql: "SYSTEM DROP DNS CACHE"},
	}
	users := []struct {
		name string
		who  credentials
	}{{"anonymous", asAnonymous}, {"dashboards", asDashboards}}
	for _, u := range users {
		for _, a := range attacks {
			t.Run(u.name+"/"+a.name, func(t *testing.T) {
				resp, body := doAs(t, u.who, "POST", nil, a.sql)
				if resp.StatusCode == 200 || strings.Contains(body, "root:") || strings.Contains(body, "secret page") {
					t.Fatalf("got %d %q; want a refusal that shows nothing of the file or page", resp.StatusCode, clip(body))
				}
				if a.created != "" {
					if _, err := os.Stat(a.created); err == nil {
						t.Fatalf("%s exists; want the write refused", a.created)
					}
				}
			})
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("local web server got %d requests; want 0", n)
	}
	if status, body := rawQuery(shared, "SELECT count() FROM "+db+".lines"); status != 200 || body != "0\n" {
		t.Fatalf("rows inserted by the attacks: got %d %q; want 200 \"0\\n\"", status, body)
	}
	t.Run("allowed table functions still work", func(t *testing.T) {
		for _, u := range users[1:] {
			resp, body := doAs(t, u.who, "POST", nil, "SELECT count() FROM numbers(10)")
			if resp.StatusCode != 200 || body != "10\n" {
				t.Fatalf("%s numbers(10): got %d %q; want 200 \"10\\n\"", u.name, resp.StatusCode, body)
			}
		}
	})
}

func TestDashboardsUserIsReadOnly(t *testing.T) {
	db := newDatabase(t)
	if status, body := rawQuery(shared, "CREATE TABLE "+db+".t (x UInt32) ENGINE = MergeTree ORDER BY x AS SELECT number FROM numbers(100)"); status != 200 {
		t.Fatalf("create table: got %d %s", status, body)
	}
	refused := []struct {
		name   string
		params url.Values
		sql    string
	}{
		{name: "drop table", sql: "DROP TABLE " + db + ".t"},
		{name: "truncate", sql: "TRUNCATE TABLE " + db + ".t"},
		{name: "insert", sql: "INSERT INTO " + db + ".t VALUES (1000)"},
		{name: "create", sql: "CREATE TABLE " + db + ".x (x UInt8) ENGINE = Memory"},
		{name: "alter delete", sql: "ALTER TABLE " + db + ".t DELETE WHERE 1"},
		{name: "SET", sql: "SET max_execution_time = 0"},
		{name: "SETTINGS clause raising the time limit", sql: "SELECT count() FROM " + db + ".t SETTINGS max_execution_time = 0"},
		{name: "SETTINGS clause raising the result limit", sql: "SELECT count() FROM " + db + ".t SETTINGS max_result_rows = 0"},
		{name: "readonly=0 in URL", params: vals("readonly", "0"), sql: "DROP TABLE " + db + ".t"},
		{name: "unknown setting in URL", params: vals("allow_ddl", "1"), sql: "SELECT 1"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := doAs(t, asDashboards, "POST", tc.params, tc.sql)
			if resp.StatusCode == 200 {
				t.Fatalf("got 200 %q; want a refusal", clip(body))
			}
		})
	}
	if status, body := rawQuery(shared, "SELECT count() FROM "+db+".t"); status != 200 || body != "100\n" {
		t.Fatalf("table after the dashboards user's attempts: got %d %q; want 200 \"100\\n\"", status, body)
	}
	t.Run("reads work", func(t *testing.T) {
		resp, body := doAs(t, asDashboards, "POST", vals("database", db, "max_threads", "1"), "SELECT sum(x) FROM t")
		if resp.StatusCode != 200 || body != "4950\n" {
			t.Fatalf("got %d %q; want 200 \"4950\\n\"", resp.StatusCode, body)
		}
	})
	t.Run("result size is bounded", func(t *testing.T) {
		resp, body := doAs(t, asDashboards, "POST", vals("max_result_rows", "0"), "SELECT number FROM numbers(10000000)")
		if resp.StatusCode == 200 {
			t.Fatalf("10M rows: got 200 with %d bytes; want the result limit to refuse it", len(body))
		}
	})
	t.Run("pipeline user is not readonly after a dashboards query", func(t *testing.T) {
		if status, body := rawQuery(shared, "SELECT getSetting('readonly'), getSetting('max_result_rows')"); status != 200 || body != "0\t0\n" {
			t.Fatalf("got %d %q; want 200 \"0\\t0\\n\"", status, body)
		}
	})
}

// TestDashboardsQueryCannotHoldTheEngine runs a query that would take
// hours as the dashboards user, asking for no time limit and one-row
// blocks, while the pipeline user keeps querying: the attack is cut at the
// dashboards limit and every pipeline query finishes within that limit
// plus 2 s. Sleeping past the limit inside one block is refused at once.
func TestDashboardsQueryCannotHoldTheEngine(t *testing.T) {
	const pipelineBound = dashMaxExecution + 2*time.Second
	resp, body := doAs(t, asDashboards, "POST", vals("max_block_size", "1", "max_execution_time", "0"), "SELECT sum(sleepEachRow(0.5)) FROM numbers(40)")
	if resp.StatusCode != 500 || resp.Header.Get("X-ClickHouse-Exception-Code") != "160" {
		t.Fatalf("sleepEachRow(0.5): got %d %q; want 500 with code 160 (TOO_SLOW)", resp.StatusCode, clip(body))
	}
	attack := make(chan string, 1)
	started := time.Now()
	go func() {
		resp, body := doAs(t, asDashboards, "POST", vals("max_block_size", "100000000", "max_execution_time", "0", "max_threads", "64"), "SELECT count() FROM numbers(1999999999) WHERE cityHash64(repeat(toString(number), 50)) = 0")
		attack <- fmt.Sprintf("%d %s after %v", resp.StatusCode, strings.TrimSpace(body), time.Since(started).Round(100*time.Millisecond))
	}()
	time.Sleep(300 * time.Millisecond) // let the attack reach the engine first
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		wg.Go(func() {
			t0 := time.Now()
			status, body := rawQuery(shared, fmt.Sprintf("SELECT %d", i))
			if took := time.Since(t0); status != 200 || took > pipelineBound {
				errs <- fmt.Errorf("pipeline query %d: got %d %q after %v; want 200 within %v", i, status, body, took, pipelineBound)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case got := <-attack:
		if !strings.HasPrefix(got, "500 Code: 159.") {
			t.Fatalf("attack: got %q; want 500 with code 159 (TIMEOUT_EXCEEDED)", got)
		}
	case <-time.After(dashMaxExecution + 5*time.Second):
		t.Fatalf("attack still running after %v; want it cut at %v", time.Since(started), dashMaxExecution)
	}
}

func TestNoCORSWildcard(t *testing.T) {
	tests := []struct {
		name   string
		method string
		params url.Values
	}{
		{"add_http_cors_header", "GET", vals("query", "SELECT 1", "add_http_cors_header", "1")},
		{"preflight", "OPTIONS", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := httpDo(t, tc.method, tc.params, "", http.Header{"Origin": {"https://evil.example"}})
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
				t.Fatalf("Access-Control-Allow-Origin: got %q; want none for an origin not configured", got)
			}
		})
	}
}

// TestSlowBodyIsCutOff sends a body one byte a second: the server must
// give up on it within the body timeout.
func TestSlowBodyIsCutOff(t *testing.T) {
	for _, who := range []struct {
		name string
		auth string
	}{{"pipeline", ""}, {"dashboards", "Authorization: Basic " + basic(dashUser, dashPassword) + "\r\n"}} {
		t.Run(who.name, func(t *testing.T) {
			t.Parallel() // each waits out the body timeout
			conn, err := net.DialTimeout("tcp", shared.Addr(), 5*time.Second)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer conn.Close()
			started := time.Now()
			if _, err := fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: 1000\r\n\r\nS", who.auth); err != nil {
				t.Fatalf("write head: %v", err)
			}
			closed := make(chan time.Duration, 1)
			go func() {
				_, _ = io.Copy(io.Discard, conn)
				closed <- time.Since(started)
			}()
			limit := testBodyTimeout + 5*time.Second
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case took := <-closed:
					if took > limit {
						t.Fatalf("connection closed after %v; want within %v", took, limit)
					}
					return
				case <-tick.C:
					if time.Since(started) > limit {
						t.Fatalf("slow body still accepted after %v; want it cut off within %v", time.Since(started), limit)
					}
					_, _ = conn.Write([]byte("E"))
				}
			}
		})
	}
}

func basic(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

// TestIdleConnectionIsClosed checks that a keep-alive connection left idle
// is closed by the server.
func TestIdleConnectionIsClosed(t *testing.T) {
	conn, err := net.DialTimeout("tcp", shared.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	started := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(testIdleTimeout + 5*time.Second))
	_, err = br.ReadByte()
	if took := time.Since(started); err == nil || took > testIdleTimeout+3*time.Second {
		t.Fatalf("idle connection: read returned %v after %v; want it closed within %v", err, took, testIdleTimeout+3*time.Second)
	}
}

// TestOutsideRequestsAreBounded holds the outside request slots with
// stalled bodies: one more outside request is refused at once, while the
// pipeline user still gets through.
func TestOutsideRequestsAreBounded(t *testing.T) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := 0; i < testMaxOutside; i++ {
		c, err := net.DialTimeout("tcp", shared.Addr(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic %s\r\nContent-Length: 100000\r\n\r\nSELECT ", basic(dashUser, dashPassword)); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	started := time.Now()
	resp, body := doAs(t, asDashboards, "POST", nil, "SELECT 1")
	if resp.StatusCode != http.StatusServiceUnavailable || time.Since(started) > 2*time.Second {
		t.Fatalf("outside request beyond the bound: got %d %q after %v; want 503 at once", resp.StatusCode, body, time.Since(started))
	}
	if status, body := rawQuery(shared, "SELECT 7"); status != 200 || body != "7\n" {
		t.Fatalf("pipeline request meanwhile: got %d %q; want 200 \"7\\n\"", status, body)
	}
}

func TestPipelinePassword(t *testing.T) {
	if got := runHelperProcess(t, "auth", filepath.Join(t.TempDir(), "data")); got != "auth ok" {
		t.Fatalf("pipeline user with a password: got %q; want %q", got, "auth ok")
	}
}

// TestStartRefusesOpenAddressWithoutPasswords fails before the engine is
// touched, so it runs beside the shared server.
func TestStartRefusesOpenAddressWithoutPasswords(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"all interfaces, no passwords", Config{Addr: "0.0.0.0:0"}, `pipeline user "default" has no password`},
		{"loopback, no pipeline password", Config{Addr: "127.0.0.1:0"}, `pipeline user "default" has no password`},
		{"empty host", Config{Addr: ":0", Pipeline: User{Password: "p"}}, "password for the dashboards user"},
		{"same names", Config{Addr: "127.0.0.1:0", Pipeline: User{Name: "x", Password: "p"}, Readonly: User{Name: "x"}}, "different names"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir, tc.cfg.Logger = t.TempDir(), logger
			s, err := Start(tc.cfg)
			if err == nil {
				_ = s.Close(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start(%s): got %v; want an error containing %q", tc.cfg.Addr, err, tc.want)
			}
		})
	}
}

// TestErrorsHideSpoolPaths: a failed INSERT must not tell the client where
// the server keeps request data.
func TestErrorsHideSpoolPaths(t *testing.T) {
	db := newDatabase(t)
	if status, body := rawQuery(shared, "CREATE TABLE "+db+".n (x UInt32) ENGINE = MergeTree ORDER BY x"); status != 200 {
		t.Fatalf("create table: got %d %s", status, body)
	}
	resp, body := httpDo(t, "POST", vals("query", "INSERT INTO "+db+".n FORMAT CSV"), "1\nnot a number\n", nil)
	if resp.StatusCode == 200 {
		t.Fatalf("bad CSV: got 200; want an error")
	}
	if strings.Contains(body, "chembed-insert") || strings.Contains(body, shared.spoolDir) {
		t.Fatalf("error: got %q; want no spool file path", clip(body))
	}
}

// TestPipelineQueryTextIsBounded: only statements are held in memory, so
// SQL text has a bound while INSERT data in a text format streams past it.
func TestPipelineQueryTextIsBounded(t *testing.T) {
	db := newDatabase(t)
	if status, body := rawQuery(shared, "CREATE TABLE "+db+".j (x UInt64, s String) ENGINE = MergeTree ORDER BY x"); status != 200 {
		t.Fatalf("create table: got %d %s", status, body)
	}
	var rows strings.Builder
	rows.WriteString("INSERT INTO " + db + ".j FORMAT JSONEachRow\n")
	n := 0
	for rows.Len() <= maxPipelineQueryBytes+1<<20 {
		fmt.Fprintf(&rows, "{\"x\":%d,\"s\":\"%s\"}\n", n, strings.Repeat("v", 100))
		n++
	}
	tests := []struct {
		name   string
		body   string
		status int
	}{
		{"JSONEachRow insert past the bound", rows.String(), 200},
		{"SELECT past the bound", "SELECT '" + strings.Repeat("x", maxPipelineQueryBytes) + "'", 413},
		{"VALUES past the bound", "INSERT INTO " + db + ".j VALUES " + strings.Repeat("(1, 'v'), ", maxPipelineQueryBytes/10+1) + "(1, 'v')", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawQuery(shared, tc.body)
			if status != tc.status {
				t.Fatalf("got %d %q; want %d", status, clip(body), tc.status)
			}
		})
	}
	if want := n + maxPipelineQueryBytes/10 + 2; true {
		if status, body := rawQuery(shared, "SELECT count() FROM "+db+".j"); status != 200 || body != fmt.Sprintf("%d\n", want) {
			t.Fatalf("rows: got %d %q; want %d", status, body, want)
		}
	}
}
