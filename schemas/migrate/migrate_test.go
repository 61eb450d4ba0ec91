package migrate

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestSplitStatements(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want []string
	}{
		{"one", "CREATE TABLE a (x UInt8) ENGINE = Memory;", []string{"CREATE TABLE a (x UInt8) ENGINE = Memory"}},
		{"comments dropped", "-- why\nCREATE TABLE a\n-- inside\n(x UInt8);\n", []string{"CREATE TABLE a\n(x UInt8)"}},
		{"two", "SELECT 1;\nSELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		{"last without semicolon", "SELECT 1;\nSELECT 2", []string{"SELECT 1", "SELECT 2"}},
		{"semicolon inside a line stays", "SELECT ';' AS x;", []string{"SELECT ';' AS x"}},
		{"only comments", "-- nothing\n\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := splitStatements(tt.sql)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []uint32
		wantErr string
	}{
		{"ordered", fstest.MapFS{"002_b.sql": {Data: []byte("SELECT 2;")}, "001_a.sql": {Data: []byte("SELECT 1;")}}, []uint32{1, 2}, ""},
		{"bad name", fstest.MapFS{"first.sql": {Data: []byte("SELECT 1;")}}, nil, "want NNN_name.sql"},
		{"same version twice", fstest.MapFS{"001_a.sql": {Data: []byte("SELECT 1;")}, "1_b.sql": {Data: []byte("SELECT 1;")}}, nil, "is not above"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := load(tt.files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []uint32
			for _, m := range ms {
				got = append(got, m.Version)
				if len(m.Checksum) != 64 {
					t.Errorf("version %d: got checksum %q; want sha256 hex", m.Version, m.Checksum)
				}
			}
			if len(got) != len(tt.want) || got[0] != tt.want[0] {
				t.Errorf("got versions %v; want %v", got, tt.want)
			}
		})
	}
}

// TestEmbeddedMigrationsParse keeps the shipped files loadable: numbered, ordered, non-empty.
func TestEmbeddedMigrationsParse(t *testing.T) {
	ms, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != uint32(i+1) {
			t.Errorf("got migration %d at position %d; want consecutive versions from 1", m.Version, i)
		}
		if len(m.Statements) == 0 {
			t.Errorf("migration %03d_%s: got no statements", m.Version, m.Name)
		}
	}
}

// Repair re-creates what the migrations create and leave in place: every CREATE of a shipped
// file is seen, and what a later file drops or renames away is not expected any more.
func TestObjectsAreWhatTheMigrationsLeave(t *testing.T) {
	ms, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	creates := 0
	for _, m := range ms {
		for _, s := range m.Statements {
			if strings.HasPrefix(strings.ToUpper(s), "CREATE") && createRe.MatchString(s) {
				creates++
			} else if strings.HasPrefix(strings.ToUpper(s), "CREATE") {
				t.Errorf("migration %03d_%s: a CREATE the schema check cannot read: %.60s", m.Version, m.Name, s)
			}
		}
	}
	got := map[string]string{}
	for _, o := range objects(ms) {
		got[o.name] = strings.Join(o.stmts, ";\n")
	}
	tests := []struct {
		name string
		want bool
		kind string // the statement that creates it, when expected
	}{
		{"view_deltas", true, "TABLE"}, // with 004's columns: see below
		{"views_by_second", true, "VIEW"},
		{"views_total", true, "VIEW"}, // a table until 004, a view since
		{"views_total_by_day", true, "TABLE"},
		{"views_by_day", true, "VIEW"}, // a table until 024, a view since
		{"views_by_day_rollup", false, ""},
		{"unique_viewers", true, "TABLE"},
		{"likes", true, "TABLE"},
		{"like_totals", true, "VIEW"},
		{"sketch_checkpoints", true, "TABLE"},
		{"partition_claims", true, "TABLE"},
		{"batch_items", true, "TABLE"},
		{"dead_letters", true, "TABLE"},
		{"views_total_mv", false, ""}, // dropped by 004
		{"views_by_minute_mv", false, ""},
		{"views_total_legacy", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stmt, ok := got[tt.name]
			if ok != tt.want {
				t.Fatalf("got expected %v; want %v", ok, tt.want)
			}
			if ok && !strings.Contains(strings.ToUpper(stmt), "CREATE "+tt.kind) {
				t.Errorf("got %.60s; want CREATE %s", stmt, tt.kind)
			}
		})
	}
	// A re-created table gets the columns later migrations added and the types they changed.
	for name, want := range map[string]string{"view_deltas": "ADD COLUMN IF NOT EXISTS epoch", "views_by_minute": "MODIFY COLUMN views Int64"} {
		if !strings.Contains(got[name], want) {
			t.Errorf("%s: got statements %q; want one with %q", name, got[name], want)
		}
	}
}
