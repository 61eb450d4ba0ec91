package chembed

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuardInspect(t *testing.T) {
	g := newGuard([]string{"file", "url", "s3", "numbers", "merge"})
	tests := []struct {
		name, tree string
		refused    string // "" when allowed; else part of the message
	}{
		{"select", "SelectWithUnionQuery (children 1)\n ExpressionList (children 1)\n  SelectQuery (children 1)\n   ExpressionList (children 1)\n    Literal UInt64_1", ""},
		{"numbers", "SelectWithUnionQuery (children 1)\n    Function numbers (children 1)\n", ""},
		{"show", "ShowTables", ""},
		{"describe", "DescribeQuery (children 1)\n TableExpression (children 1)", ""},
		{"explain", "Explain EXPLAIN (children 1)\n SelectWithUnionQuery (children 1)", ""},
		{"alias naming a call", "SelectWithUnionQuery (children 1)\n    Literal UInt64_1 (alias Function file)", ""},
		{"scalar file", "SelectWithUnionQuery (children 1)\n            Function file (children 1)\n", "file(...)"},
		{"upper-case File", "SelectWithUnionQuery (children 1)\n  Function FILE (children 1)", "FILE(...)"},
		{"table function url", "SelectWithUnionQuery (children 1)\n              Function url (children 1)", "url(...)"},
		{"file with an alias", "SelectWithUnionQuery (children 1)\n  Function file (alias x) (children 1)", "file(...)"},
		{"set", "Set", "readonly"},
		{"insert", "InsertQuery   (children 2)\n Function file (children 1)", "readonly"},
		{"system", "SYSTEM query", "readonly"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := g.inspect(tc.tree)
			switch {
			case tc.refused == "" && e != nil:
				t.Fatalf("inspect: got %q; want it allowed", e.text)
			case tc.refused != "" && e == nil:
				t.Fatalf("inspect: got allowed; want a refusal naming %q", tc.refused)
			case tc.refused != "" && !strings.Contains(e.text, tc.refused):
				t.Fatalf("inspect: got %q; want a refusal naming %q", e.text, tc.refused)
			}
		})
	}
}

// canary is a file only a query that escapes the guard could read, and
// outfile a path only one that escapes it could write.
func canary(t testing.TB) (path, content, outfile string) {
	t.Helper()
	dir := t.TempDir()
	path, content = filepath.Join(dir, "secret"), "canary-7f3a9c"
	if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content, filepath.Join(dir, "written")
}

// forbiddenVariants writes each way out of the engine the ways an attacker
// would: every quoting and escape of the name, Unicode and ASCII spaces
// and comments before the parenthesis, any letter case.
func forbiddenVariants(secret, outfile string) []string {
	names := []string{"file", "FILE", "File", "`file`", `"file"`, "“file”", "`fil\\x65`", "`fil\\145`", "\"f\\x69le\"", "`\\x66ile`"}
	gaps := []string{"", " ", "\u00a0", "\t", "\n", "\u2003", "\u3000", "/* c */", "--c\n", "\u00a0/**/\u00a0"}
	lit := quoteString(secret)
	var out []string
	for _, n := range names {
		for _, g := range gaps {
			out = append(out,
				"SELECT "+n+g+"("+lit+")",
				"SELECT * FROM "+n+g+"("+lit+", 'LineAsString')",
				"SELECT (SELECT "+n+g+"("+lit+")) AS x FORMAT JSON",
			)
		}
	}
	return append(out,
		"SELECT * FROM file("+lit+", 'LineAsString') SETTINGS readonly = 0",
		"SELECT 1; SELECT file("+lit+")",
		"SELECT 1 INTO OUTFILE "+quoteString(outfile),
		"SELECT 1 INTO\u00a0OUTFILE "+quoteString(outfile)+" FORMAT CSV",
		"SELECT 1 /* x */ into /* y */ outfile "+quoteString(outfile)+" TRUNCATE",
		"SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')",
		"INSERT INTO FUNCTION file("+quoteString(outfile)+", 'TSV', 'x String') VALUES ('x')",
		"SELECT * FROM executable('id', 'TSV', 'x String')",
		"SET `readonl\\x79` = 0",
	)
}

// TestOutsideGuardOnTheEngine sends every variant to the real engine as
// the dashboards user and as an anonymous caller: none may read the
// canary or write the outfile.
func TestOutsideGuardOnTheEngine(t *testing.T) {
	secret, content, outfile := canary(t)
	variants := forbiddenVariants(secret, outfile)
	for _, who := range []struct {
		name string
		cred credentials
	}{{"dashboards", asDashboards}, {"anonymous", asAnonymous}} {
		admitted := 0
		for _, sql := range variants {
			resp, body := doAs(t, who.cred, "POST", nil, sql)
			if strings.Contains(body, content) {
				t.Errorf("%s ran %q: got the canary file's content (%d %q); want a refusal", who.name, sql, resp.StatusCode, body)
			}
			if resp.StatusCode == http.StatusOK {
				admitted++
			}
			if _, err := os.Stat(outfile); err == nil {
				t.Fatalf("%s ran %q: got %s written; want no file", who.name, sql, outfile)
			}
		}
		if who.name == "anonymous" && admitted > 0 {
			t.Errorf("anonymous: got %d of %d statements answered 200; want every one refused", admitted, len(variants))
		}
	}
	// The check must not have stopped the dashboards user's ordinary reads.
	if resp, body := doAs(t, asDashboards, "POST", nil, "SELECT count() FROM numbers(10)"); resp.StatusCode != 200 || body != "10\n" {
		t.Fatalf("dashboards SELECT after the probes: got %d %q; want 200 \"10\\n\"", resp.StatusCode, body)
	}
}

// FuzzOutsideGuard feeds the engine, as the dashboards user, SQL the
// fuzzer derives from the forbidden variants; no input may read the
// canary or write the outfile. Plain `go test` runs the seeds.
func FuzzOutsideGuard(f *testing.F) {
	secret, content, outfile := canary(f)
	for _, sql := range forbiddenVariants(secret, outfile) {
		f.Add(sql)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4096 || strings.Contains(sql, content) {
			return // an error message echoes the query
		}
		resp, body := doAs(t, asDashboards, "POST", url.Values{}, sql)
		if strings.Contains(body, content) {
			t.Fatalf("dashboards ran %q: got the canary's content (%d %q)", sql, resp.StatusCode, body)
		}
		if _, err := os.Stat(outfile); err == nil {
			t.Fatalf("dashboards ran %q: got %s written", sql, outfile)
		}
	})
}
