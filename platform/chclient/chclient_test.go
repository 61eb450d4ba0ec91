package chclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/devstack/chembed"
	"github.com/tallypipeline/tally/platform/chclient"
	"github.com/tallypipeline/tally/platform/tlsconf"
	"github.com/tallypipeline/tally/testsupport/testcerts"
)

// The real engine (chDB on the HTTP interface) behind an HTTPS front, as a TLS-terminating
// ClickHouse or proxy would be: a client with TLS and the right CA queries it; an untrusted
// server certificate or a plain-HTTP client is refused.
// adminPassword is the test engines' administrator password.
const adminPassword = "chclient-test-admin"

func TestTLSAgainstClickHouse(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch, err := chembed.Start(chembed.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: logger, Pipeline: chembed.User{Password: adminPassword}})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close(context.Background())
	certs, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcerts.Make(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certs.Cert, certs.Key)
	if err != nil {
		t.Fatal(err)
	}
	backend, _ := url.Parse("http://" + ch.Addr())
	front := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(backend))
	front.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	front.StartTLS()
	defer front.Close()
	addr := strings.TrimPrefix(front.URL, "https://")
	tests := []struct {
		name string
		tls  tlsconf.Files
		ok   bool
	}{
		{"tls with the CA", tlsconf.Files{Enabled: true, CAFile: certs.CA}, true},
		{"tls with the CA and a server name", tlsconf.Files{Enabled: true, CAFile: certs.CA, ServerName: "localhost"}, true},
		{"tls, wrong server name", tlsconf.Files{Enabled: true, CAFile: certs.CA, ServerName: "clickhouse.example"}, false},
		{"tls, untrusted CA", tlsconf.Files{Enabled: true, CAFile: other.CA}, false},
		{"plain http to https", tlsconf.Files{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			conn, err := chclient.Open(ctx, chclient.Options{Addr: addr, Database: "tlstest", Username: "default", Password: adminPassword, TLS: tt.tls})
			if !tt.ok {
				if err == nil {
					conn.Close()
					t.Fatal("got a connection; want it refused")
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v; want a connection", err)
			}
			defer conn.Close()
			var one uint8
			if err := conn.QueryRow(ctx, "SELECT toUInt8(1)").Scan(&one); err != nil || one != 1 {
				t.Errorf("got %d, %v; want 1", one, err)
			}
		})
	}
	if _, err := chclient.Open(context.Background(), chclient.Options{Addr: addr, TLS: tlsconf.Files{Enabled: true, CAFile: "/nonexistent"}}); err == nil || !strings.Contains(err.Error(), "read CA file") {
		t.Errorf("got %v; want an error reading the CA file", err)
	}
}

// A batch INSERT describes its table once, not before every batch; once a batch fails (the table
// changed under it), the next describes the table again and goes in.
func TestInsertColumnsLearnedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch, err := chembed.Start(chembed.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: logger, Pipeline: chembed.User{Password: adminPassword}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close(context.Background())
	conn, err := chclient.Open(ctx, chclient.Options{Addr: ch.Addr(), Database: "columns_test", Password: adminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	describes := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "tally_chembed_statements_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" && l.GetValue() == "DESCRIBE" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	insert := func(values ...any) error {
		t.Helper()
		b, err := conn.PrepareBatch(ctx, "INSERT INTO probe (id, v)")
		if err != nil {
			return err
		}
		defer b.Abort()
		if err := b.Append(values...); err != nil {
			return err
		}
		return b.Send()
	}
	if err := conn.Exec(ctx, "CREATE TABLE probe (id UInt32, v UInt64, at DateTime DEFAULT now(), twice UInt64 MATERIALIZED v * 2) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := insert(uint32(i), uint64(i)); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	if got := describes(); got != 1 {
		t.Errorf("got %v DESCRIBE statements for 3 batches; want 1", got)
	}
	var n, twice uint64
	if err := conn.QueryRow(ctx, "SELECT count(), sum(twice) FROM probe").Scan(&n, &twice); err != nil || n != 3 || twice != 6 {
		t.Errorf("got %d rows, sum(twice) %d, %v; want 3, 6", n, twice, err)
	}

	if err := conn.Exec(ctx, "DROP TABLE probe"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE probe (id UInt32, v Array(String)) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	if err := insert(uint32(9), uint64(9)); err == nil {
		t.Errorf("got a UInt64 batch into an Array(String) column accepted; want an error")
	}
	if err := insert(uint32(9), []string{"a", "b"}); err != nil {
		t.Errorf("insert after the table changed: got %v; want it described again and accepted", err)
	}
	if got := describes(); got != 2 {
		t.Errorf("got %v DESCRIBE statements; want 2 (once more after the failed batch)", got)
	}
}

// Rows gathered column by column land as the same rows appended one by one, batch after batch
// through the same columns; columns of unequal lengths are refused and leave the columns empty.
func TestSendColumnsStoresWhatRowsWould(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openEngine(t, "gathered_test")
	const cols = "(batch UInt16, n Int64, item String, second DateTime('UTC'), ms DateTime64(3, 'UTC'), us DateTime64(6, 'UTC'))"
	for _, table := range []string{"by_rows", "by_columns"} {
		if err := conn.Exec(ctx, "CREATE TABLE "+table+" "+cols+" ENGINE = MergeTree ORDER BY (batch, n)"); err != nil {
			t.Fatal(err)
		}
	}
	var (
		batch  chclient.Column[uint16]
		n      chclient.Column[int64]
		item   chclient.Column[string]
		second chclient.Column[int64]
		ms, us chclient.Column[time.Time]
	)
	all := []chclient.Gathered{&batch, &n, &item, &second, &ms, &us}
	at := time.Date(2026, 12, 5, 22, 50, 1, 123456789, time.UTC)
	for b, rows := range []int{3, 1000, 0, 7} {
		rb, err := conn.PrepareBatch(ctx, "INSERT INTO by_rows (batch, n, item, second, ms, us)")
		if err != nil {
			t.Fatal(err)
		}
		for i := range rows {
			when := at.Add(time.Duration(b*rows+i) * 1001 * time.Microsecond)
			id := strings.Repeat("x", i%13) + "é" + string(rune('a'+i%26))
			if err := rb.Append(uint16(b), int64(-i), id, when, when, when); err != nil {
				t.Fatal(err)
			}
			batch.Add(uint16(b))
			n.Add(int64(-i))
			item.Add(id)
			second.Add(when.Unix())
			ms.Add(when)
			us.Add(when)
		}
		if err := rb.Send(); err != nil {
			t.Fatal(err)
		}
		if err := chclient.SendColumns(ctx, conn, "INSERT INTO by_columns (batch, n, item, second, ms, us)", all...); err != nil {
			t.Fatalf("batch %d of %d rows: %v", b, rows, err)
		}
		for i, c := range all {
			if c.Len() != 0 {
				t.Fatalf("batch %d: column %d holds %d rows after its send; want 0", b, i, c.Len())
			}
		}
	}
	var diff, total uint64
	q := "SELECT count() FROM ((SELECT * FROM by_rows EXCEPT SELECT * FROM by_columns) UNION ALL (SELECT * FROM by_columns EXCEPT SELECT * FROM by_rows))"
	if err := conn.QueryRow(ctx, q).Scan(&diff); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM by_columns").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if diff != 0 || total != 1010 {
		t.Errorf("got %d rows gathered by columns, %d differing from the rows appended one by one; want 1010, 0", total, diff)
	}

	batch.Add(1)
	n.Add(1)
	err := chclient.SendColumns(ctx, conn, "INSERT INTO by_columns (batch, n, item, second, ms, us)", all...)
	if err == nil || !strings.Contains(err.Error(), "column 2 holds 0 rows; column 0 holds 1") {
		t.Errorf("got %v for columns of unequal lengths; want them refused", err)
	}
	if batch.Len() != 0 || n.Len() != 0 {
		t.Errorf("got %d and %d rows left after a refused send; want 0", batch.Len(), n.Len())
	}
}

// Each hands its function every row of a query run with its arguments, in order; an error of the
// query, of a scan, of the rows or of the function ends it and is the one returned, and the rows
// are closed whatever the outcome.
func TestEach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := &watchedConn{Conn: openEngine(t, "each_test")}
	errStop, errCut, errAny := errors.New("stop"), errors.New("rows cut short"), errors.New("any error")
	tests := []struct {
		name    string
		query   string
		args    []any
		rowsErr error // what the rows report after their last row
		stopAt  int   // the row (from 1) whose function returns errStop; 0: none
		want    []uint64
		wantErr error // errAny: any error
	}{
		{"every row, in order", "SELECT number FROM numbers(?) ORDER BY number", []any{5}, nil, 0, []uint64{0, 1, 2, 3, 4}, nil},
		{"no rows", "SELECT number FROM numbers(?) WHERE number > ?", []any{5, 10}, nil, 0, nil, nil},
		{"query refused", "SELECT number FROM", nil, nil, 0, nil, errAny},
		{"a scan fails", "SELECT toString(number) FROM numbers(3)", nil, nil, 0, nil, errAny},
		{"the function fails", "SELECT number FROM numbers(5) ORDER BY number", nil, nil, 2, []uint64{0, 1}, errStop},
		{"the rows end in an error", "SELECT number FROM numbers(3) ORDER BY number", nil, errCut, 0, []uint64{0, 1, 2}, errCut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn.opened, conn.closed, conn.err = 0, 0, tt.rowsErr
			var got []uint64
			err := chclient.Each(ctx, conn, tt.query, tt.args, func(rows driver.Rows) error {
				var n uint64
				if err := rows.Scan(&n); err != nil {
					return err
				}
				got = append(got, n)
				if len(got) == tt.stopAt {
					return errStop
				}
				return nil
			})
			switch {
			case tt.wantErr == nil && err != nil, tt.wantErr == errAny && err == nil,
				tt.wantErr != nil && tt.wantErr != errAny && !errors.Is(err, tt.wantErr):
				t.Errorf("got error %v; want %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got rows %v; want %v", got, tt.want)
			}
			if conn.closed != conn.opened {
				t.Errorf("got %d of %d rows closed; want all", conn.closed, conn.opened)
			}
		})
	}
}

// Pairs scans each row's two columns as the function's argument types, in order, and a column
// that does not scan as its type ends it with an error.
func TestPairs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openEngine(t, "pairs_test")
	t.Run("two columns", func(t *testing.T) {
		var got []string
		err := chclient.Pairs(ctx, conn, "SELECT toString(number), toInt64(number) * -2 FROM numbers(?) ORDER BY number", []any{3},
			func(k string, v int64) { got = append(got, fmt.Sprintf("%s=%d", k, v)) })
		if want := []string{"0=0", "1=-2", "2=-4"}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("got %v, %v; want %v, no error", got, err, want)
		}
	})
	t.Run("a column of another type", func(t *testing.T) {
		calls := 0
		err := chclient.Pairs(ctx, conn, "SELECT number, toString(number) FROM numbers(2)", nil, func(uint64, int64) { calls++ })
		if err == nil || calls != 0 {
			t.Fatalf("got %d calls, error %v; want none and an error", calls, err)
		}
	})
}

// A quorum connection carries the quorum settings on every statement, and on tables that are
// not replicated (the embedded engine's) writes and reads go on as without them.
func TestQuorumConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	ch, err := chembed.Start(chembed.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: logger, Pipeline: chembed.User{Password: adminPassword}})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close(context.Background())
	conn, err := chclient.Open(ctx, chclient.Options{Addr: ch.Addr(), Database: "quorum_test", Password: adminPassword, Quorum: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got []string
	err = chclient.Each(ctx, conn, "SELECT toString(getSetting('insert_quorum')), toString(getSetting('insert_quorum_parallel')), toString(getSetting('select_sequential_consistency'))", nil,
		func(rows driver.Rows) error {
			var q, p, s string
			if err := rows.Scan(&q, &p, &s); err != nil {
				return err
			}
			got = append(got, q, p, s)
			return nil
		})
	if want := []string{"auto", "false", "1"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("got settings %v, %v; want %v", got, err, want)
	}
	if err := conn.Exec(ctx, "CREATE TABLE t (n UInt64) ENGINE = MergeTree ORDER BY n"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO t VALUES (1), (2)"); err != nil {
		t.Fatalf("insert with quorum settings into a table that is not replicated: %v", err)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT sum(n) FROM t").Scan(&n); err != nil || n != 3 {
		t.Fatalf("got sum %d, %v; want 3", n, err)
	}
}

// watchedConn counts the rows its queries open and close, and has them report err, when set,
// after their last row, as rows cut short by a broken stream do.
type watchedConn struct {
	driver.Conn
	opened, closed int
	err            error
}

func (c *watchedConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := c.Conn.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	c.opened++
	return &watchedRows{Rows: rows, conn: c}, nil
}

type watchedRows struct {
	driver.Rows
	conn *watchedConn
}

func (r *watchedRows) Close() error {
	r.conn.closed++
	return r.Rows.Close()
}

func (r *watchedRows) Err() error {
	if r.conn.err != nil {
		return r.conn.err
	}
	return r.Rows.Err()
}

// BenchmarkBatchOfDeltas builds a batch of 100,000 rows of view_deltas' shape, row by row
// (driver.Batch.Append) and column by column (Column, SendColumns' Append), without sending it:
// the client's share of a flush's largest INSERT.
func BenchmarkBatchOfDeltas(b *testing.B) {
	ctx := context.Background()
	conn := openEngine(b, "bench")
	if err := conn.Exec(ctx, "CREATE TABLE d (partition UInt16, end_offset Int64, watermark DateTime64(3, 'UTC'), item_id String, second DateTime('UTC'), views UInt64, epoch UInt64) ENGINE = Null"); err != nil {
		b.Fatal(err)
	}
	const rows, insert = 100_000, "INSERT INTO d (partition, end_offset, watermark, item_id, second, views, epoch)"
	items := make([]string, rows)
	for i := range items {
		items[i] = "item-" + strconv.Itoa(i)
	}
	wm := time.Now().UTC()
	b.Run("rows", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			batch, err := conn.PrepareBatch(ctx, insert)
			if err != nil {
				b.Fatal(err)
			}
			for i, it := range items {
				if err := batch.Append(uint16(3), int64(1000), wm, it, time.Unix(int64(i), 0).UTC(), uint64(1), uint64(2)); err != nil {
					b.Fatal(err)
				}
			}
			_ = batch.Abort()
		}
	})
	b.Run("columns", func(b *testing.B) {
		b.ReportAllocs()
		var (
			part      chclient.Column[uint16]
			end, sec  chclient.Column[int64]
			marks     chclient.Column[time.Time]
			item      chclient.Column[string]
			views, ep chclient.Column[uint64]
		)
		cols := []chclient.Gathered{&part, &end, &marks, &item, &sec, &views, &ep}
		for b.Loop() {
			batch, err := conn.PrepareBatch(ctx, insert)
			if err != nil {
				b.Fatal(err)
			}
			for i, it := range items {
				part.Add(3)
				end.Add(1000)
				marks.Add(wm)
				item.Add(it)
				sec.Add(int64(i))
				views.Add(1)
				ep.Add(2)
			}
			for i, c := range cols {
				if err := batch.Column(i).Append(c.Values()); err != nil {
					b.Fatal(err)
				}
				c.Reset()
			}
			_ = batch.Abort()
		}
	})
}

// openEngine starts the real engine for tb and returns a client of database db in it; both end
// with tb.
func openEngine(tb testing.TB, db string) driver.Conn {
	tb.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch, err := chembed.Start(chembed.Config{DataDir: tb.TempDir(), Addr: "127.0.0.1:0", Logger: logger, Pipeline: chembed.User{Password: adminPassword}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ch.Close(context.Background()) })
	conn, err := chclient.Open(context.Background(), chclient.Options{Addr: ch.Addr(), Database: db, Password: adminPassword})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// Insert sends what fill appends as one block, prepares nothing when fill appends nothing (the
// table need not even exist), and names the rows in an append's or a prepare's error.
func TestInsert(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := openEngine(t, "insert_test")
	if err := conn.Exec(ctx, "CREATE TABLE rows (n Int64, s String) ENGINE = MergeTree ORDER BY n"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		insert  string
		rows    [][]any
		wantErr string
		want    uint64 // rows in the table after
	}{
		{"rows", "INSERT INTO rows (n, s)", [][]any{{int64(1), "a"}, {int64(2), "b"}, {int64(3), "c"}}, "", 3},
		{"no rows, no statement", "INSERT INTO no_such_table (n, s)", nil, "", 3},
		{"a bad row", "INSERT INTO rows (n, s)", [][]any{{int64(4), "d"}, {"not a number", "e"}}, "append test rows: ", 3},
		{"no table", "INSERT INTO no_such_table (n, s)", [][]any{{int64(5), "f"}}, "prepare the insert of test rows: ", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := chclient.Insert(ctx, conn, "test rows", tt.insert, func(add func(...any) error) error {
				for _, r := range tt.rows {
					if err := add(r...); err != nil {
						return err
					}
				}
				return nil
			})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)) {
				t.Fatalf("got error %v; want one starting %q", err, tt.wantErr)
			}
			var n uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM rows").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != tt.want {
				t.Errorf("got %d rows; want %d", n, tt.want)
			}
		})
	}
}
