package chembed

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	chcompress "github.com/ClickHouse/ch-go/compress"
)

func vals(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

func TestHTTPQueries(t *testing.T) {
	db := newDatabase(t)
	if status, body := rawQuery(shared, "CREATE TABLE "+db+".t (id UInt32, s String) ENGINE = MergeTree ORDER BY id"); status != 200 {
		t.Fatalf("create table: got %d %s", status, body)
	}
	tests := []struct {
		name     string
		method   string
		params   url.Values
		body     string
		header   http.Header
		want     string
		wantType string
	}{
		{name: "query in URL", method: "GET", params: vals("query", "SELECT 1"), want: "1\n"},
		{name: "query in body", method: "POST", body: "SELECT 'a\tb', 2", want: "a\\tb\t2\n"},
		{name: "query split between URL and body", method: "POST", params: vals("query", "SELECT 1 +"), body: "2", want: "3\n"},
		{name: "insert JSONEachRow body", method: "POST", body: "INSERT INTO " + db + ".t FORMAT JSONEachRow\n{\"id\":1,\"s\":\"one\"}\n{\"id\":2,\"s\":\"two\"}\n", want: ""},
		{name: "insert TSV body, query in URL", method: "POST", params: vals("query", "INSERT INTO "+db+".t FORMAT TabSeparated"), body: "3\tthree\n4\tfour;\\\\\n", want: ""},
		{name: "insert VALUES body", method: "POST", body: "INSERT INTO " + db + ".t (id, s) VALUES (5, 'fi''ve'), (6, 'six')", want: ""},
		{name: "insert with SETTINGS", method: "POST", params: vals("query", "INSERT INTO "+db+".t SETTINGS max_insert_threads = 1 FORMAT CSV"), body: "7,seven\n", want: ""},
		{name: "default TabSeparated", method: "POST", body: "SELECT id, s FROM " + db + ".t ORDER BY id",
			want:     "1\tone\n2\ttwo\n3\tthree\n4\tfour;\\\\\n5\tfi\\'ve\n6\tsix\n7\tseven\n",
			wantType: "text/tab-separated-values; charset=UTF-8"},
		{name: "default_format JSONEachRow", method: "POST", params: vals("default_format", "JSONEachRow"), body: "SELECT id, s FROM " + db + ".t WHERE id <= 2 ORDER BY id",
			want: "{\"id\":1,\"s\":\"one\"}\n{\"id\":2,\"s\":\"two\"}\n", wantType: "application/json; charset=UTF-8"},
		{name: "FORMAT clause beats default_format", method: "POST", params: vals("default_format", "JSONEachRow"), body: "SELECT id FROM " + db + ".t WHERE id = 1 FORMAT CSVWithNames",
			want: "\"id\"\n1\n", wantType: "text/csv; charset=UTF-8; header=present"},
		{name: "TSVWithNames", method: "POST", body: "SELECT 1 AS x FORMAT TSVWithNames", want: "x\n1\n"},
		{name: "CSV", method: "POST", params: vals("default_format", "CSV"), body: "SELECT 'a,b' AS x, 2", want: "\"a,b\",2\n"},
		{name: "JSONCompact", method: "POST", params: vals("default_format", "JSONCompact", "output_format_write_statistics", "0"), body: "SELECT 1 AS x",
			want: "{\n\t\"meta\":\n\t[\n\t\t{\n\t\t\t\"name\": \"x\",\n\t\t\t\"type\": \"UInt8\"\n\t\t}\n\t],\n\n\t\"data\":\n\t[\n\t\t[1]\n\t],\n\n\t\"rows\": 1\n}\n"},
		{name: "param_ placeholders", method: "POST", params: vals("param_s", "it's\\t;", "param_n", "41"), body: "SELECT {s:String}, {n:UInt8} + 1",
			want: "it\\'s\\t;\t42\n"},
		{name: "param_ identifier", method: "POST", params: vals("param_tbl", "t", "database", db), body: "SELECT count() FROM {tbl:Identifier}", want: "7\n"},
		{name: "database param", method: "POST", params: vals("database", db), body: "SELECT currentDatabase(), count() FROM t", want: db + "\t7\n"},
		{name: "database not kept", method: "POST", body: "SELECT currentDatabase()", want: "default\n"},
		{name: "settings param", method: "POST", params: vals("max_threads", "3"), body: "SELECT getSetting('max_threads')", want: "3\n"},
		{name: "settings not kept", method: "POST", body: "SELECT getSetting('max_threads') = (SELECT getSetting('max_threads') SETTINGS max_threads = DEFAULT)", want: "1\n"},
		{name: "SET in body not kept", method: "POST", body: "SET max_block_size = 77", want: ""},
		{name: "after SET", method: "POST", body: "SELECT getSetting('max_block_size') != 77", want: "1\n"},
		{name: "SET readonly last", method: "POST", body: "SET max_threads = 3, readonly = 1", want: ""},
		{name: "after SET readonly", method: "POST", body: "SELECT getSetting('readonly'), getSetting('max_threads') != 3", want: "0\t1\n"},
		{name: "USE not kept", method: "POST", body: "USE " + db, want: ""},
		{name: "after USE", method: "POST", body: "SELECT currentDatabase()", want: "default\n"},
		{name: "trailing semicolon", method: "POST", body: "SELECT 5; -- done", want: "5\n"},
		{name: "gzip request body", method: "POST", body: gzipString(t, "SELECT 'zipped'"), header: http.Header{"Content-Encoding": {"gzip"}}, want: "zipped\n"},
		{name: "ping", method: "GET", want: "Ok.\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := httpDo(t, tc.method, tc.params, tc.body, tc.header)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d (%s); want 200", resp.StatusCode, body)
			}
			if body != tc.want {
				t.Fatalf("body: got %q; want %q", body, tc.want)
			}
			if tc.wantType != "" && resp.Header.Get("Content-Type") != tc.wantType {
				t.Fatalf("Content-Type: got %q; want %q", resp.Header.Get("Content-Type"), tc.wantType)
			}
		})
	}
}

func gzipString(t testing.TB, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatalf("gzip: %v", err)
	}
	if err := zw.Close(); err != nil {
		t.Fatalf("gzip: %v", err)
	}
	return b.String()
}

func TestHTTPHeadersAndCompression(t *testing.T) {
	t.Run("query_id echoed", func(t *testing.T) {
		resp, _ := httpDo(t, "POST", vals("query_id", "my-query-1"), "SELECT 1", nil)
		if got := resp.Header.Get("X-ClickHouse-Query-Id"); got != "my-query-1" {
			t.Fatalf("X-ClickHouse-Query-Id: got %q; want %q", got, "my-query-1")
		}
	})
	t.Run("query_id generated", func(t *testing.T) {
		resp, _ := httpDo(t, "POST", nil, "SELECT 1", nil)
		if got := resp.Header.Get("X-ClickHouse-Query-Id"); len(got) != 36 {
			t.Fatalf("X-ClickHouse-Query-Id: got %q; want a UUID", got)
		}
	})
	t.Run("gzip response with enable_http_compression", func(t *testing.T) {
		resp, body := httpDo(t, "POST", vals("enable_http_compression", "1"), "SELECT 'squeezed'", http.Header{"Accept-Encoding": {"br;q=0, gzip"}})
		if got := resp.Header.Get("Content-Encoding"); got != "gzip" {
			t.Fatalf("Content-Encoding: got %q; want gzip", got)
		}
		zr, err := gzip.NewReader(strings.NewReader(body))
		if err != nil {
			t.Fatalf("gzip reader: %v", err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil || string(plain) != "squeezed\n" {
			t.Fatalf("gunzipped body: got %q, %v; want %q", plain, err, "squeezed\n")
		}
	})
	t.Run("no encoding without enable_http_compression", func(t *testing.T) {
		resp, body := httpDo(t, "POST", nil, "SELECT 'plain'", http.Header{"Accept-Encoding": {"gzip"}})
		if resp.Header.Get("Content-Encoding") != "" || body != "plain\n" {
			t.Fatalf("got encoding %q body %q; want none and %q", resp.Header.Get("Content-Encoding"), body, "plain\n")
		}
	})
	t.Run("compress=1 response", func(t *testing.T) {
		_, body := httpDo(t, "POST", vals("compress", "1"), "SELECT 'native blocks'", nil)
		plain, err := io.ReadAll(newBlockReader(strings.NewReader(body), 1<<20))
		if err != nil || string(plain) != "native blocks\n" {
			t.Fatalf("decompressed body: got %q, %v; want %q", plain, err, "native blocks\n")
		}
	})
	t.Run("decompress=1 request", func(t *testing.T) {
		w := chcompress.NewWriter(chcompress.LevelZero, chcompress.LZ4)
		if err := w.Compress([]byte("SELECT 'from blocks'")); err != nil {
			t.Fatalf("compress: %v", err)
		}
		resp, body := httpDo(t, "POST", vals("decompress", "1"), string(w.Data), nil)
		if resp.StatusCode != 200 || body != "from blocks\n" {
			t.Fatalf("got %d %q; want 200 %q", resp.StatusCode, body, "from blocks\n")
		}
	})
	t.Run("cors preflight from a configured origin", func(t *testing.T) {
		resp, _ := httpDo(t, "OPTIONS", nil, "", http.Header{"Origin": {corsOrigin}})
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != corsOrigin {
			t.Fatalf("OPTIONS /: got %d with origin %q; want 204 with %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), corsOrigin)
		}
	})
	t.Run("cors from a configured origin", func(t *testing.T) {
		resp, _ := httpDo(t, "GET", vals("query", "SELECT 1", "add_http_cors_header", "1"), "", http.Header{"Origin": {corsOrigin}})
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != corsOrigin {
			t.Fatalf("Access-Control-Allow-Origin: got %q; want %q", got, corsOrigin)
		}
	})
}

func TestHTTPErrors(t *testing.T) {
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("query", "SELECT 1")
	_ = mw.Close()
	tests := []struct {
		name     string
		method   string
		path     string
		params   url.Values
		body     string
		header   http.Header
		status   int
		code     string
		contains string
	}{
		{name: "unknown table", method: "POST", body: "SELECT * FROM nowhere_at_all", status: 500, code: "60", contains: "Code: 60. DB::Exception: "},
		{name: "failure after rows were produced", method: "POST", body: "SELECT throwIf(number = 3), number FROM numbers(10) SETTINGS max_block_size = 1", status: 500, code: "395"},
		{name: "unknown setting", method: "POST", params: vals("no_such_setting", "1"), body: "SELECT 1", status: 500, code: "115", contains: "(UNKNOWN_SETTING)"},
		{name: "bad setting value", method: "POST", params: vals("max_threads", "many"), body: "SELECT 1", status: 500, code: "27", contains: "Code: 27."},
		{name: "unknown database", method: "POST", params: vals("database", "no_such_db"), body: "SELECT 1", status: 500, code: "81", contains: "no_such_db"},
		{name: "injection in database name", method: "POST", params: vals("database", "default`; DROP DATABASE x; --"), body: "SELECT 1", status: 500, code: "81"},
		{name: "invalid setting name", method: "POST", params: vals("max_threads=1, readonly", "1"), body: "SELECT 1", status: 400, code: "36", contains: "not an identifier"},
		{name: "multi-statement", method: "POST", body: "SELECT 1; USE system", status: 400, code: "62", contains: "Multi-statements are not allowed"},
		{name: "empty query", method: "POST", status: 400, code: "62", contains: "Empty query"},
		{name: "placeholder without param", method: "POST", body: "SELECT {s:String}", status: 400, code: "456", contains: "Substitution `s` is not set"},
		{name: "session_id unsupported", method: "POST", params: vals("session_id", "abc"), body: "SELECT 1", status: 501, code: "48", contains: "NOT_IMPLEMENTED"},
		{name: "external data unsupported", method: "POST", body: form.String(), header: http.Header{"Content-Type": {mw.FormDataContentType()}}, status: 501, code: "48"},
		{name: "unknown content encoding", method: "POST", body: "x", header: http.Header{"Content-Encoding": {"xz"}}, status: 501, code: "48"},
		{name: "corrupt compressed body", method: "POST", params: vals("decompress", "1"), body: strings.Repeat("garbage!", 8), status: 400, code: "271"},
		{name: "readonly", method: "POST", params: vals("readonly", "1"), body: "CREATE TABLE x (a UInt8) ENGINE = Memory", status: 403, code: "164"},
		{name: "unknown path", method: "GET", path: "/play", status: 404},
		{name: "method", method: "PUT", body: "SELECT 1", status: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			started := time.Now()
			resp, body := httpDoPath(t, tc.method, tc.path, tc.params, tc.body, tc.header)
			if time.Since(started) > 5*time.Second {
				t.Fatalf("answer took %v; want an error well within 5s", time.Since(started))
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status: got %d (%s); want %d", resp.StatusCode, body, tc.status)
			}
			if got := resp.Header.Get("X-ClickHouse-Exception-Code"); tc.code != "" && got != tc.code {
				t.Fatalf("X-ClickHouse-Exception-Code: got %q (%s); want %q", got, body, tc.code)
			}
			if !strings.HasPrefix(body, "Code: ") || !strings.Contains(body, tc.contains) {
				t.Fatalf("body: got %q; want a ClickHouse exception containing %q", body, tc.contains)
			}
		})
	}
	// None of the failures may have left state behind.
	resp, body := httpDo(t, "POST", nil, "SELECT currentDatabase(), getSetting('readonly')", nil)
	if resp.StatusCode != 200 || body != "default\t0\n" {
		t.Fatalf("after errors: got %d %q; want 200 %q", resp.StatusCode, body, "default\t0\n")
	}
}

func httpDoPath(t testing.TB, method, path string, params url.Values, body string, header http.Header) (*http.Response, string) {
	t.Helper()
	if path == "" || path == "/" {
		return httpDo(t, method, params, body, header)
	}
	req, err := http.NewRequest(method, "http://"+shared.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	withPipelineAuth(req)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestFailedQueryLeavesNoOutput guards against a chDB quirk: rows a failed
// query already produced are handed to the next query on the session,
// prepended to its own result.
func TestFailedQueryLeavesNoOutput(t *testing.T) {
	tests := []struct {
		name, format, query string
	}{
		{"tsv", "", "SELECT throwIf(number = 3), number FROM numbers(10) SETTINGS max_block_size = 1"},
		{"native", "Native", "SELECT throwIf(number = 50000), number FROM numbers(100000) SETTINGS max_block_size = 1000"},
		{"json", "JSONEachRow", "SELECT throwIf(number = 7), number FROM numbers(10) SETTINGS max_block_size = 1, max_threads = 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			params := url.Values{}
			if tc.format != "" {
				params.Set("default_format", tc.format)
			}
			// Only the statement itself may reach the engine: no settings
			// or database, whose SET or USE would swallow the leftovers.
			resp, body := httpDo(t, "POST", params, tc.query, nil)
			if resp.StatusCode != 500 || resp.Header.Get("X-ClickHouse-Exception-Code") != "395" {
				t.Fatalf("failing query: got %d %q; want 500 with code 395", resp.StatusCode, clip(body))
			}
			if resp, body = httpDo(t, "POST", nil, "SELECT 42", nil); resp.StatusCode != 200 || body != "42\n" {
				t.Fatalf("next query: got %d %q; want 200 %q", resp.StatusCode, clip(body), "42\n")
			}
		})
	}
}

// clip keeps failure messages readable when a body is large or binary.
func clip(s string) string {
	if len(s) > 300 {
		return s[:150] + fmt.Sprintf("...(%d bytes)...", len(s)-300) + s[len(s)-150:]
	}
	return s
}
