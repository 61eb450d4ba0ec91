package chembed

import (
	"strings"
	"testing"
)

func TestGuardScan(t *testing.T) {
	g := newGuard(
		[]string{"file", "url", "s3", "remote", "numbers", "format", "merge", "input"},
		[]string{"MergeTree", "ReplacingMergeTree", "Memory", "File", "URL", "Kafka", "Filesystem", "Atomic", "Log"},
	)
	tests := []struct {
		name, sql string
		refused   string // "" when allowed; else part of the message
	}{
		{"column named engine", "SELECT name, engine FROM system.tables WHERE engine = 'File'", ""},
		{"column named url", "SELECT url, count() FROM hits GROUP BY url", ""},
		{"scalar format", "SELECT format('{} {}', 'a', 'b')", ""},
		{"scalar log", "SELECT log(2)", ""},
		{"numbers", "SELECT * FROM numbers(10)", ""},
		{"string mentioning file()", "SELECT 'file(\\'/etc/passwd\\')'", ""},
		{"comment mentioning url()", "SELECT 1 -- url('http://x/')", ""},
		{"setting name in a string", "SELECT * FROM system.settings WHERE name = 'format_schema'", ""},
		{"MergeTree table", "CREATE TABLE t (x UInt8) ENGINE = ReplacingMergeTree(x) ORDER BY x", ""},
		{"engine without =", "CREATE TABLE t (x UInt8) ENGINE Memory", ""},
		{"database engine", "CREATE DATABASE d ENGINE = Atomic", ""},
		{"file", "SELECT * FROM file('/etc/passwd')", "file(...)"},
		{"file with a comment before (", "SELECT * FROM file /* x */ ('/etc/passwd')", "file(...)"},
		{"upper-case quoted name", "SELECT * FROM `S3`('http://x/')", "S3(...)"},
		{"Kafka without parentheses", "CREATE TABLE k (x UInt8) ENGINE Kafka SETTINGS kafka_broker_list = 'h:9092'", "ENGINE Kafka"},
		{"Filesystem database", "CREATE DATABASE fs ENGINE = Filesystem", "ENGINE Filesystem"},
		{"unknown engine", "CREATE TABLE t (x UInt8) ENGINE = SomethingNew", "ENGINE SomethingNew"},
		{"insert into function", "INSERT INTO FUNCTION numbers(1) VALUES (1)", "INSERT INTO FUNCTION"},
		{"outfile", "SELECT 1 INTO OUTFILE 'x'", "OUTFILE"},
		{"file setting", "SELECT 1 SETTINGS format_schema = 'x.proto:M'", "format_schema"},
		{"system", "SYSTEM RELOAD CONFIG", "SYSTEM"},
		{"dynamic disk", "CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x SETTINGS disk = disk(type = 'local', path = '/')", "disk(...)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := g.check(tc.sql, scanStatement(tc.sql))
			switch {
			case tc.refused == "" && e != nil:
				t.Fatalf("check(%s): got %q; want it allowed", tc.sql, e.text)
			case tc.refused != "" && e == nil:
				t.Fatalf("check(%s): got allowed; want a refusal naming %q", tc.sql, tc.refused)
			case tc.refused != "" && (!strings.Contains(e.text, tc.refused) || e.code != codeAccessDenied):
				t.Fatalf("check(%s): got %q (code %d); want code %d naming %q", tc.sql, e.text, e.code, codeAccessDenied, tc.refused)
			}
		})
	}
}

// FuzzGuardCheck runs the guard over arbitrary SQL: it must never panic,
// and a refusal is always ACCESS_DENIED.
func FuzzGuardCheck(f *testing.F) {
	g := newGuard([]string{"file", "url", "numbers"}, []string{"MergeTree", "File"})
	for _, s := range []string{
		"SELECT * FROM file('/etc/passwd')",
		"CREATE TABLE t (x UInt8) ENGINE = File(TSV)",
		"INSERT INTO FUNCTION url('x') VALUES (1)",
		"SELECT engine FROM system.tables",
		"SELECT 1 ENGINE",
		"`file`",
		"ENGINE =",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if e := g.check(sql, scanStatement(sql)); e != nil && e.code != codeAccessDenied {
			t.Fatalf("check(%q): got code %d; want %d", sql, e.code, codeAccessDenied)
		}
	})
}

// TestGuardReadDirs: the pipeline user may read files under its read
// directories with file('/dir/...') and nothing else that names a file.
func TestGuardReadDirs(t *testing.T) {
	g := newGuard([]string{"file", "url", "s3", "numbers"}, []string{"MergeTree", "File"})
	dirs := []string{"/data/sink"}
	tests := []struct {
		name, sql string
		allowed   bool
	}{
		{"a day of files", "SELECT count() FROM file('/data/sink/views/2026-12-01/*/*.parquet', 'Parquet')", true},
		{"one file, no format", "SELECT * FROM file('/data/sink/views/2026-12-01/07/p0000-1-2.parquet')", true},
		{"scalar under the directory", "SELECT file('/data/sink/_flushing/views/p0000.json')", true},
		{"outside", "SELECT * FROM file('/etc/passwd')", false},
		{"climbing out", "SELECT * FROM file('/data/sink/../../etc/passwd')", false},
		{"climbing in a glob", "SELECT * FROM file('/data/sink/{..,x}/etc/passwd')", false},
		{"a sibling with the same prefix", "SELECT * FROM file('/data/sinkhole/x')", false},
		{"relative path", "SELECT * FROM file('data/sink/x')", false},
		{"escaped quote", "SELECT * FROM file('/data/sink/\\'x')", false},
		{"path built by an expression", "SELECT * FROM file(concat('/data/sink/', 'x'))", false},
		{"path then concatenation", "SELECT * FROM file('/data/sink/' || '../../etc/passwd')", false},
		{"the directory itself", "SELECT * FROM file('/data/sink')", false},
		{"other table functions stay refused", "SELECT * FROM url('/data/sink/x')", false},
		{"insert into function file", "INSERT INTO FUNCTION file('/data/sink/x.tsv', 'TSV', 's String') VALUES ('x')", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := g.checkReading(tc.sql, scanStatement(tc.sql), dirs)
			if got := e == nil; got != tc.allowed {
				t.Fatalf("checkReading(%s): got allowed %v (%v); want %v", tc.sql, got, e, tc.allowed)
			}
			if e := g.check(tc.sql, scanStatement(tc.sql)); e == nil && strings.Contains(tc.sql, "file") {
				t.Fatalf("check(%s) without read directories: got allowed; want refused", tc.sql)
			}
		})
	}
}
