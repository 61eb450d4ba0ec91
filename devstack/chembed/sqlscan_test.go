package chembed

import (
	"slices"
	"strings"
	"testing"
)

func TestScanStatement(t *testing.T) {
	tests := []struct {
		name         string
		src          string
		kind         string
		format       string
		multi        bool
		placeholders []string
	}{
		{name: "empty", src: "  -- nothing\n", kind: ""},
		{name: "select", src: "select 1", kind: "SELECT"},
		{name: "format clause", src: "SELECT 1 FORMAT JSONEachRow", kind: "SELECT", format: "JSONEachRow"},
		{name: "format then settings", src: "SELECT 1 FORMAT JSON SETTINGS max_threads = 1;", kind: "SELECT", format: "JSON"},
		{name: "format function is not a clause", src: "SELECT format('{}', 1)", kind: "SELECT"},
		{name: "column named format", src: "SELECT format FROM t WHERE format = 1", kind: "SELECT"},
		{name: "format inside subquery", src: "SELECT * FROM (SELECT 1 FORMAT CSV)", kind: "SELECT"},
		{name: "trailing semicolons", src: "SELECT 1;; -- c\n", kind: "SELECT"},
		{name: "second statement", src: "SELECT 1; USE system", kind: "SELECT", multi: true},
		{name: "semicolon in string", src: "SELECT 'a;b', \"c;d\", `e;f`", kind: "SELECT"},
		{name: "escaped quote", src: `SELECT 'it\'s; x', 'a''b;c'`, kind: "SELECT"},
		{name: "semicolon in comments", src: "SELECT 1 -- ; USE x\n/* ; /* nested ; */ ; */ # ; hash\n", kind: "SELECT"},
		{name: "hash without space is not a comment", src: "SELECT 1 #; SET x = 1", kind: "SELECT", multi: true},
		{name: "heredoc", src: "SELECT $tag$ ; $x$ ; $tag$", kind: "SELECT"},
		{name: "unicode quotes", src: "SELECT ‘a;b’, “c;d”", kind: "SELECT"},
		{name: "unterminated string", src: "SELECT 'abc; USE x", kind: "SELECT"},
		{name: "placeholders", src: "SELECT {a:String}, {b: Array(UInt8)}, {'k': 1}, '{c:String}'", kind: "SELECT", placeholders: []string{"a", "b"}},
		{name: "set", src: "SET max_threads = 1, `param_x` = [1, 2], readonly = 0", kind: "SET"},
		{name: "parenthesised", src: "(SELECT 1) FORMAT TSV", kind: "(", format: "TSV"},
		{name: "insert select", src: "INSERT INTO t SELECT 1; SELECT 2", kind: "INSERT", multi: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := scanStatement(tc.src)
			if st.kind != tc.kind || st.format != tc.format || st.multi != tc.multi {
				t.Fatalf("scan %q: got kind %q format %q multi %v; want %q %q %v", tc.src, st.kind, st.format, st.multi, tc.kind, tc.format, tc.multi)
			}
			if !slices.Equal(st.placeholders, tc.placeholders) {
				t.Fatalf("placeholders: got %q; want %q", st.placeholders, tc.placeholders)
			}
		})
	}
}

func TestScanInsert(t *testing.T) {
	const path = "/dev/shm/x.data"
	tests := []struct {
		name    string
		src     string
		rewrite string // "" when the INSERT carries no inline data
		data    string
	}{
		{name: "format with newline", src: "INSERT INTO t FORMAT Native\n\x00\x01;'", rewrite: "INSERT INTO t FROM INFILE '/dev/shm/x.data' FORMAT Native", data: "\x00\x01;'"},
		{name: "format with blanks", src: "INSERT INTO db.t (a, b) FORMAT CSV  1,2", rewrite: "INSERT INTO db.t (a, b) FROM INFILE '/dev/shm/x.data' FORMAT CSV", data: "1,2"},
		{name: "only first newline skipped", src: "insert into t format TSV \r\n\n1", rewrite: "insert into t FROM INFILE '/dev/shm/x.data' FORMAT TSV", data: "\n1"},
		{name: "values", src: "INSERT INTO TABLE `my t` VALUES (1, 'a'), (2, 'b')", rewrite: "INSERT INTO TABLE `my t` FROM INFILE '/dev/shm/x.data' FORMAT Values", data: "(1, 'a'), (2, 'b')"},
		{name: "settings before format", src: "INSERT INTO t (x) SETTINGS async_insert = 1, a = 'FORMAT' FORMAT JSONEachRow\n{}", rewrite: "INSERT INTO t (x) FROM INFILE '/dev/shm/x.data' SETTINGS async_insert = 1, a = 'FORMAT' FORMAT JSONEachRow", data: "{}"},
		{name: "table named format", src: "INSERT INTO format FORMAT CSV\n1", rewrite: "INSERT INTO format FROM INFILE '/dev/shm/x.data' FORMAT CSV", data: "1"},
		{name: "table function", src: "INSERT INTO FUNCTION null('x UInt8') FORMAT TSV\n1", rewrite: "INSERT INTO FUNCTION null('x UInt8') FROM INFILE '/dev/shm/x.data' FORMAT TSV", data: "1"},
		{name: "insert select", src: "INSERT INTO t SELECT * FROM s FORMAT Native"},
		{name: "insert parenthesised select", src: "INSERT INTO t (SELECT 1)"},
		{name: "from infile", src: "INSERT INTO t FROM INFILE 'x' FORMAT CSV"},
		{name: "no data clause", src: "INSERT INTO t"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := scanStatement(tc.src)
			if tc.rewrite == "" {
				if st.insert != nil {
					t.Fatalf("scan %q: got inline data at %d; want none", tc.src, st.insert.dataStart)
				}
				return
			}
			if st.insert == nil {
				t.Fatalf("scan %q: got no inline data; want %q", tc.src, tc.data)
			}
			if got := st.insert.rewrite(tc.src, path); got != tc.rewrite {
				t.Fatalf("rewrite: got %q; want %q", got, tc.rewrite)
			}
			if got := tc.src[st.insert.dataStart:]; got != tc.data {
				t.Fatalf("data: got %q; want %q", got, tc.data)
			}
		})
	}
}

// FuzzScanStatement checks the scanner never panics, never reads data as
// statement, and that a rewritten INSERT is a single statement.
func FuzzScanStatement(f *testing.F) {
	seeds := []string{
		"SELECT 1", "SELECT 1; SELECT 2", "INSERT INTO t FORMAT Native\n\x00\x01",
		"INSERT INTO t VALUES (1)", "SELECT 'a\\'b' FORMAT JSON", "/* /* */ */ SELECT $a$;$a$",
		"INSERT INTO FUNCTION f(1) PARTITION BY x SETTINGS a=1 FORMAT CSV 1", "SET a = 1, b = 2",
		"SELECT {x:String}", "‘", "$", "INSERT INTO t (a", "#!", "--",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		st := scanStatement(src)
		if st.insert == nil {
			return
		}
		ins := st.insert
		if ins.infileAt > ins.clauseStart || ins.clauseStart > ins.dataStart || ins.dataStart > len(src) {
			t.Fatalf("scan %q: offsets infileAt %d clauseStart %d dataStart %d out of order", src, ins.infileAt, ins.clauseStart, ins.dataStart)
		}
		sql := ins.rewrite(src, "/dev/shm/chembed-insert-1.data")
		again := scanStatement(sql)
		if again.multi || again.kind != "INSERT" || again.insert != nil {
			t.Fatalf("rewrite of %q is %q: got multi %v kind %q inline data %v; want one INSERT without inline data", src, sql, again.multi, again.kind, again.insert != nil)
		}
		if strings.IndexByte(sql, 0) >= 0 && strings.IndexByte(src[:ins.dataStart], 0) < 0 {
			t.Fatalf("rewrite of %q carries a zero byte from the data: %q", src, sql)
		}
	})
}
