package chembed

import (
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantErr  int // HTTP status of the expected error; 0 for none
		settings string
		params   string
		check    func(options) bool
	}{
		{name: "clickhouse-go", raw: "default_format=Native&client_protocol_version=54460&database=db&compress=1&decompress=1&network_compression_method=ZSTD&query=INSERT+INTO+t+FORMAT+Native",
			settings: "",
			check: func(o options) bool {
				return o.format == "Native" && o.clientRevision == 54460 && o.database == "db" && o.compress && o.decompress &&
					o.blockMethod == blockZSTD && o.query == "INSERT INTO t FORMAT Native"
			}},
		{name: "settings sorted", raw: "max_threads=2&async_insert=1&insert_deduplication_token=a%27b", settings: "async_insert=1,insert_deduplication_token=a'b,max_threads=2"},
		{name: "params", raw: "param_x=1&param_y=%27%3B", params: "x=1,y=';"},
		{name: "ignored", raw: "user=u&password=p&query_id=q&wait_end_of_query=1", check: func(o options) bool { return o.queryID == "q" && len(o.settings) == 0 }},
		{name: "http compression", raw: "enable_http_compression=1&http_zlib_compression_level=3", check: func(o options) bool { return o.httpCompression && len(o.settings) == 0 }},
		{name: "readonly emulated", raw: "readonly=1", check: func(o options) bool { return o.readonly && len(o.settings) == 0 }},
		{name: "bad setting name", raw: "max_threads%3D1%3B+USE+x=1", wantErr: http.StatusBadRequest},
		{name: "bad param name", raw: "param_a-b=1", wantErr: http.StatusBadRequest},
		{name: "bad revision", raw: "client_protocol_version=x", wantErr: http.StatusBadRequest},
		{name: "bad compression method", raw: "network_compression_method=brotli", wantErr: http.StatusBadRequest},
		{name: "session", raw: "session_id=1", wantErr: http.StatusNotImplemented},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			values, err := url.ParseQuery(tc.raw)
			if err != nil {
				t.Fatalf("parse query %q: %v", tc.raw, err)
			}
			o, cerr := parseOptions(values)
			if tc.wantErr != 0 {
				if cerr == nil || cerr.status != tc.wantErr {
					t.Fatalf("parseOptions(%s): got %v; want an error with status %d", tc.raw, cerr, tc.wantErr)
				}
				return
			}
			if cerr != nil {
				t.Fatalf("parseOptions(%s): got %v; want no error", tc.raw, cerr)
			}
			if got := joinSettings(o.settings); got != tc.settings {
				t.Fatalf("settings: got %q; want %q", got, tc.settings)
			}
			if got := joinSettings(o.params); got != tc.params {
				t.Fatalf("params: got %q; want %q", got, tc.params)
			}
			if tc.check != nil && !tc.check(o) {
				t.Fatalf("options: got %+v; want the checked fields set", o)
			}
		})
	}
}

func joinSettings(s []setting) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = x.name + "=" + x.value
	}
	return strings.Join(parts, ",")
}

// TestQuoteStringInEngine proves on the real engine that a quoted literal
// evaluates to exactly the bytes it was made from.
func TestQuoteStringInEngine(t *testing.T) {
	tests := []string{"", "plain", "'", "\\", "\\'", "''", "a\x00b", "line\nbreak\ttab", "'; SELECT 1; --", "\\x41\\N", "ünïcødé", "\xff\xfe\x80", "$$ $x$", "{x:String}"}
	for _, s := range tests {
		t.Run(hex.EncodeToString([]byte(s)), func(t *testing.T) {
			sql := "SELECT hex(" + quoteString(s) + ")"
			if st := scanStatement(sql); st.multi || len(st.placeholders) > 0 {
				t.Fatalf("scan %q: got multi %v placeholders %v; want one statement, none", sql, st.multi, st.placeholders)
			}
			_, body := httpDo(t, "POST", nil, sql, nil)
			want := strings.ToUpper(hex.EncodeToString([]byte(s))) + "\n"
			if body != want {
				t.Fatalf("SELECT hex(%s): got %q; want %q", quoteString(s), body, want)
			}
		})
	}
}

func FuzzParseOptions(f *testing.F) {
	for _, s := range []string{
		"max_threads=2&param_x=%27%3B+USE+x", "query=SELECT+1&database=d", "a%00b=1", "param_=1",
		"max_threads=1%5C", "x=%27&param_y=%5C%27", "compress=1&network_compression_method=zstd",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		values, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		o, cerr := parseOptions(values)
		if cerr != nil {
			if !strings.HasPrefix(cerr.text, "Code: ") || cerr.status < 400 {
				t.Fatalf("parseOptions(%q): got error %+v; want a ClickHouse-style error with a 4xx/5xx status", raw, cerr)
			}
			return
		}
		if len(o.settings)+len(o.params) == 0 {
			return
		}
		// Whatever the values, the SET built from them must be one SET
		// statement with no placeholder (names are checked identifiers,
		// values quoted literals).
		sql := setStatement(o.settings, o.params)
		if st := scanStatement(sql); st.kind != "SET" || st.multi || len(st.placeholders) > 0 {
			t.Fatalf("SET for %q is %q: got kind %q multi %v placeholders %q; want one SET", raw, sql, st.kind, st.multi, st.placeholders)
		}
		reset := scanStatement(resetStatement(names(o.settings), map[string]string{"max_threads": "1"}, nil))
		if len(o.settings) > 0 && (reset.kind != "SET" || reset.multi) {
			t.Fatalf("reset for %q: got kind %q multi %v; want one SET", raw, reset.kind, reset.multi)
		}
	})
}
