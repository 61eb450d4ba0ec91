package chembed

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoAnonymousAdministrator: a caller without credentials is refused
// everything, writes and reads alike, over POST and GET, as ClickHouse
// refuses an unknown user.
func TestNoAnonymousAdministrator(t *testing.T) {
	db := newDatabase(t)
	for _, sql := range []string{
		"DROP TABLE IF EXISTS " + db + ".anything",
		"DROP DATABASE " + db,
		"CREATE TABLE " + db + ".t (x UInt8) ENGINE = Memory",
		"INSERT INTO FUNCTION null('x UInt8') VALUES (1)",
		"ALTER TABLE system.one DELETE WHERE 1",
		"SYSTEM DROP DNS CACHE",
		"SELECT 1 SETTINGS max_execution_time = 0",
		"SELECT 1",
	} {
		for _, method := range []string{"POST", "GET"} {
			t.Run(method+" "+sql, func(t *testing.T) {
				resp, body := doAs(t, asAnonymous, method, vals("query", sql), "")
				if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-ClickHouse-Exception-Code") != "516" {
					t.Fatalf("got %d %q; want 401 with code 516 (AUTHENTICATION_FAILED)", resp.StatusCode, clip(body))
				}
			})
		}
	}
	if status, body := rawQuery(shared, "EXISTS DATABASE "+db); status != 200 || body != "1\n" {
		t.Fatalf("database %s after the attempts: got %d %q; want it still there", db, status, body)
	}
}

// TestGetOnlyReads: as in ClickHouse, a GET request runs with readonly=2
// whoever sends it, so a link or an <img> in a web page cannot write.
func TestGetOnlyReads(t *testing.T) {
	db, out := newDatabase(t), filepath.Join(t.TempDir(), "out.tsv")
	for _, sql := range []string{
		"CREATE TABLE " + db + ".g (x UInt8) ENGINE = Memory",
		"DROP DATABASE " + db,
		"INSERT INTO FUNCTION file(" + quoteString(out) + ", 'TSV', 'x UInt8') VALUES (1)",
		"SELECT 1 INTO OUTFILE " + quoteString(out),
	} {
		resp, body := doAs(t, asPipeline, "GET", vals("query", sql), "")
		if code := resp.Header.Get("X-ClickHouse-Exception-Code"); resp.StatusCode == 200 || code != "164" && code != "497" {
			t.Errorf("GET %s as the pipeline user: got %d %q; want code 164 (READONLY) or 497 (ACCESS_DENIED)", sql, resp.StatusCode, clip(body))
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("GET wrote %s; want no file", out)
	}
	if resp, body := doAs(t, asPipeline, "GET", vals("query", "SELECT 1 SETTINGS max_threads = 1"), ""); resp.StatusCode != 200 || body != "1\n" {
		t.Fatalf("GET SELECT with a SETTINGS clause: got %d %q; want 200 \"1\\n\"", resp.StatusCode, body)
	}
	if resp, body := doAs(t, asPipeline, "POST", vals("query", "CREATE TABLE "+db+".g (x UInt8) ENGINE = Memory"), ""); resp.StatusCode != 200 {
		t.Fatalf("POST CREATE TABLE as the pipeline user: got %d %q; want 200", resp.StatusCode, clip(body))
	}
}

// TestBrowserPagesAreKeptOut: a page in a browser on this machine reaches
// loopback, by a cross-site POST or by a name of its own that resolves to
// 127.0.0.1 (DNS rebinding); both are refused before any credentials are
// looked at.
func TestBrowserPagesAreKeptOut(t *testing.T) {
	_, port, _ := strings.Cut(shared.Addr(), ":")
	tests := []struct {
		name   string
		method string
		header http.Header
		host   string
		status int
	}{
		{"same machine by address", "POST", nil, "127.0.0.1:" + port, 200},
		{"same machine by name", "POST", nil, "localhost:" + port, 200},
		{"IPv6 loopback", "POST", nil, "[::1]:" + port, 200},
		{"rebinding name", "POST", nil, "evil.example:" + port, 403},
		{"rebinding name, GET", "GET", nil, "evil.example", 403},
		{"loopback-looking name", "POST", nil, "127.0.0.1.evil.example:" + port, 403},
		{"localhost with a trailing dot", "POST", nil, "localhost.:" + port, 403},
		{"cross-site POST", "POST", http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}, "", 403},
		{"cross-site POST, Origin only", "POST", http.Header{"Origin": {"https://evil.example"}}, "", 403},
		{"configured CORS origin", "POST", http.Header{"Origin": {corsOrigin}, "Sec-Fetch-Site": {"cross-site"}}, "", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := "http://" + shared.Addr() + "/?" + url.Values{"query": {"SELECT 1"}}.Encode()
			req, err := http.NewRequest(tc.method, u, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			withPipelineAuth(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d; want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

// TestSessionSettingsReturnToBaseline: a SET the statement scan cannot
// read (an escape inside a quoted name) must not leave the shared session
// read-only, or every later insert would fail until a restart.
func TestSessionSettingsReturnToBaseline(t *testing.T) {
	db := newDatabase(t)
	for _, sql := range []string{"SET `readonl\\x79` = 1", "SET `max_threads` = 1, `max_memory_usag\\x65` = 1000"} {
		if status, body := rawQuery(shared, sql); status != 200 {
			t.Fatalf("%s: got %d %q; want 200", sql, status, body)
		}
		if status, body := rawQuery(shared, "CREATE TABLE IF NOT EXISTS "+db+".s (x UInt8) ENGINE = Memory"); status != 200 {
			t.Fatalf("CREATE TABLE after %s: got %d %q; want 200", sql, status, clip(body))
		}
		if status, body := rawQuery(shared, "SELECT getSetting('readonly'), getSetting('max_memory_usage') != 1000"); status != 200 || body != "0\t1\n" {
			t.Fatalf("settings after %s: got %d %q; want readonly 0 and max_memory_usage back", sql, status, body)
		}
	}
}

// TestDashboardsLimitsAreTheEngines: every outside query runs with caps
// the caller can lower and never raise, in the URL or in the SQL text.
func TestDashboardsLimitsAreTheEngines(t *testing.T) {
	const read = "SELECT getSetting('max_threads'), getSetting('max_block_size'), getSetting('max_memory_usage'), getSetting('max_rows_to_read'), getSetting('max_execution_time'), getSetting('readonly')"
	resp, body := doAs(t, asDashboards, "POST", vals("max_threads", "64", "max_block_size", "100000000", "max_memory_usage", "0", "max_rows_to_read", "0", "max_execution_time", "0"), read)
	if want := "2\t65536\t536870912\t2000000000\t2\t1\n"; resp.StatusCode != 200 || body != want {
		t.Fatalf("raised limits: got %d %q; want %q", resp.StatusCode, body, want)
	}
	resp, body = doAs(t, asDashboards, "POST", vals("max_threads", "1", "max_execution_time", "1.5"), read)
	if want := "1\t65536\t536870912\t2000000000\t1.5\t1\n"; resp.StatusCode != 200 || body != want {
		t.Fatalf("lowered limits: got %d %q; want %q", resp.StatusCode, body, want)
	}
	for _, sql := range []string{
		"SELECT 1 SETTINGS max_execution_time = 0",
		"SELECT 1 SETTINGS max_memory_usage = 0",
		"SELECT 1 SETTINGS readonly = 0",
	} {
		resp, body := doAs(t, asDashboards, "POST", nil, sql)
		if resp.StatusCode == 200 || resp.Header.Get("X-ClickHouse-Exception-Code") != "164" {
			t.Errorf("%s: got %d %q; want code 164 (READONLY)", sql, resp.StatusCode, clip(body))
		}
	}
}
