package chembed

import (
	"net/url"
	"strings"
	"testing"
)

func TestStatementTable(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		who  role
		want string
	}{
		{"insert", "INSERT INTO click_deltas (a, b) FORMAT Native", rolePipeline, "click_deltas"},
		{"insert select", "INSERT INTO views_by_minute (item_id) SELECT item_id FROM view_deltas", rolePipeline, "views_by_minute"},
		{"select", "SELECT count() FROM `dedupe_batches` WHERE partition = 1", rolePipeline, "dedupe_batches"},
		{"lower case", "select 1 from batch_items", rolePipeline, "batch_items"},
		{"delete", "DELETE FROM click_deltas WHERE partition = 3", rolePipeline, "click_deltas"},
		{"no table", "SELECT 1", rolePipeline, ""},
		{"outside", "SELECT * FROM anything_at_all", roleReadonly, "outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := statementTable(tt.sql, tt.who); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}

func TestEngineTimeIsCounted(t *testing.T) {
	db := newDatabase(t)
	table := "engine_time_probe"
	n := func() float64 {
		return counter(t, "tally_chembed_statements_total", "SELECT", table)
	}
	before := n()
	params := url.Values{"database": {db}}
	if resp, body := httpDo(t, "POST", params, "CREATE TABLE "+table+" (x UInt8) ENGINE = Memory", nil); resp.StatusCode != 200 {
		t.Fatalf("create table: got %d %s; want 200", resp.StatusCode, body)
	}
	for range 2 {
		if resp, body := httpDo(t, "POST", params, "SELECT count() FROM "+table, nil); resp.StatusCode != 200 {
			t.Fatalf("select: got %d %s; want 200", resp.StatusCode, body)
		}
	}
	if got := n() - before; got != 2 {
		t.Errorf("got %v SELECT statements counted for %s; want 2", got, table)
	}
	if secs := counter(t, "tally_chembed_engine_seconds_total", "SELECT", table); secs <= 0 {
		t.Errorf("got %v engine seconds for SELECTs of %s; want more than 0", secs, table)
	}
}

// counter reads the counter of name with the given labels from the shared server's registry (0
// when it does not exist yet).
func counter(t *testing.T, name, kind, table string) float64 {
	t.Helper()
	mfs, err := sharedReg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["table"] == table {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// FuzzStatementTable: any SQL gives a label without spaces, and outside queries only "outside",
// so the labels stay few and well formed.
func FuzzStatementTable(f *testing.F) {
	for _, s := range []string{"INSERT INTO t FORMAT Native", "SELECT 1 FROM", "from from from", "", "INTO `a b`"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if got := statementTable(sql, roleReadonly); got != "outside" {
			t.Errorf("got %q for an outside query; want \"outside\"", got)
		}
		if got := statementTable(sql, rolePipeline); strings.ContainsAny(got, " \t\n") {
			t.Errorf("got %q for %q; want no whitespace", got, sql)
		}
	})
}
