package chembed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/chdb-io/chdb-go/chdb"
	"github.com/prometheus/client_golang/prometheus"
)

// chDB allows one session per process, so the whole test binary shares one
// Server; tests keep apart by using their own databases.
var (
	shared    *Server
	sharedDir string
	sharedReg = prometheus.NewRegistry()
	dbCounter atomic.Int64
)

// helperEnv makes the test binary act as a separate process for the tests
// that need one (chDB's data-directory lock is per process).
const helperEnv = "CHEMBED_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Getenv("CHEMBED_TEST_DIR")))
	}
	dir, err := os.MkdirTemp("", "chembed-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create data dir:", err)
		os.Exit(1)
	}
	sharedDir = dir
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	shared, err = Start(Config{
		DataDir: dir, Addr: "127.0.0.1:0", Logger: logger, RequestTimeout: time.Minute,
		Pipeline:           User{Password: pipePassword},
		Readonly:           User{Name: dashUser, Password: dashPassword},
		Limits:             Limits{MaxExecutionTime: dashMaxExecution},
		CORSOrigins:        []string{corsOrigin},
		BodyTimeout:        testBodyTimeout,
		IdleTimeout:        testIdleTimeout,
		MaxOutsideRequests: testMaxOutside,
		Registry:           sharedReg,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start shared server:", err)
		os.Exit(1)
	}
	code := m.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := shared.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "close shared server:", err)
		code = 1
	}
	cancel()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// runHelper is the body of a helper process; its stdout is the test's
// evidence.
func runHelper(mode, dir string) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	switch mode {
	case "start":
		s, err := Start(Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Password: pipePassword}})
		if err != nil {
			fmt.Println("start error:", err)
			return 0
		}
		_ = s.Close(context.Background())
		fmt.Println("started")
		return 0
	case "hold":
		// Holds the directory with chDB alone, as a process that is not
		// chembed would, until stdin closes.
		sess, err := chdb.NewSession(dir)
		if err != nil {
			fmt.Println("hold error:", err)
			return 1
		}
		fmt.Println("holding")
		_, _ = io.Copy(io.Discard, os.Stdin)
		sess.Close()
		return 0
	case "nilpanic":
		// With a session open, a nil-pointer dereference must crash the
		// process as Go does, not hang it inside the engine's handler.
		s, err := Start(Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Password: pipePassword}})
		if err != nil {
			fmt.Println("start error:", err)
			return 1
		}
		if status, body := rawQuery(s, "SELECT 1"); status != 200 {
			fmt.Println("query error:", status, body)
			return 1
		}
		var p *eventRow
		fmt.Println(p.ID)
		return 0
	case "auth":
		if err := pipelinePassword(dir, logger); err != nil {
			fmt.Println("auth error:", err)
			return 0
		}
		fmt.Println("auth ok")
		return 0
	case "lifecycle":
		if err := lifecycle(dir, logger); err != nil {
			fmt.Println("lifecycle error:", err)
			return 0
		}
		fmt.Println("lifecycle ok")
		return 0
	}
	fmt.Println("unknown helper mode", mode)
	return 2
}

// lifecycle checks, in a fresh process, that Close waits for a request in
// flight, is idempotent, and releases the data directory for a new Start.
func lifecycle(dir string, logger *slog.Logger) error {
	s, err := Start(Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Password: pipePassword}, RequestTimeout: 2 * time.Second, MaxBodyBytes: 1 << 10})
	if err != nil {
		return fmt.Errorf("first start: %w", err)
	}
	started := time.Now()
	status, body := rawQuery(s, "SELECT sleepEachRow(0.5) FROM numbers(20) SETTINGS max_block_size = 1")
	if status != 500 || !strings.Contains(body, "Code: 159.") || time.Since(started) > 5*time.Second {
		return fmt.Errorf("query past RequestTimeout: got %d %q after %v; want 500 with code 159 within 5s", status, body, time.Since(started))
	}
	status, body = rawQuery(s, "SELECT '"+strings.Repeat("x", 2<<10)+"'")
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "LIMIT_EXCEEDED") {
		return fmt.Errorf("body over MaxBodyBytes: got %d %q; want 413 LIMIT_EXCEEDED", status, body)
	}
	if _, err := Start(Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Password: pipePassword}}); err == nil || !strings.Contains(err.Error(), "is another process using it?") {
		return fmt.Errorf("second start on the same dir: got %v; want an 'is another process using it?' error", err)
	}
	if _, err := Start(Config{DataDir: dir + "-other", Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Password: pipePassword}}); err == nil || !strings.Contains(err.Error(), "one per process") {
		return fmt.Errorf("second start on another dir: got %v; want a 'one per process' error", err)
	}
	if status, body := rawQuery(s, "CREATE TABLE default.kept (x UInt8) ENGINE = MergeTree ORDER BY x AS SELECT 7"); status != 200 {
		return fmt.Errorf("create a table in database default: got %d %q", status, body)
	}
	slow := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/", strings.NewReader("SELECT sleep(1)"))
		withPipelineAuth(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		slow <- fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if got := <-slow; got != "200 0" {
		return fmt.Errorf("request in flight during Close: got %q; want %q", got, "200 0")
	}
	if err := s.Close(ctx); err != nil {
		return fmt.Errorf("second close: got %w; want nil", err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/ping"); err == nil {
		return errors.New("ping after close: got an answer; want a connection error")
	}
	s2, err := Start(Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Password: pipePassword}})
	if err != nil {
		return fmt.Errorf("start after close: %w", err)
	}
	defer func() { _ = s2.Close(ctx) }()
	status, body = rawQuery(s2, "SELECT 41 + 1")
	if status != 200 || body != "42\n" {
		return fmt.Errorf("query after restart: got %d %q; want 200 \"42\\n\"", status, body)
	}
	// The default database is re-attached without chDB's filesystem
	// overlay at every start; its tables must survive that.
	status, body = rawQuery(s2, "SELECT x FROM default.kept")
	if status != 200 || body != "7\n" {
		return fmt.Errorf("table in database default after restart: got %d %q; want 200 \"7\\n\"", status, body)
	}
	return nil
}

// pipelinePassword checks, in a fresh process, a server whose pipeline
// user has a password: requests without it are refused, clickhouse-go
// with it works.
func pipelinePassword(dir string, logger *slog.Logger) error {
	s, err := Start(Config{DataDir: dir, Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Name: "tally", Password: "pipe-secret"}})
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	resp, err := http.Post("http://"+s.Addr()+"/", "text/plain", strings.NewReader("SELECT 1"))
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-ClickHouse-Exception-Code") != "516" {
		return fmt.Errorf("no credentials: got %d code %q; want 401 code 516", resp.StatusCode, resp.Header.Get("X-ClickHouse-Exception-Code"))
	}
	for _, auth := range []clickhouse.Auth{{Username: "tally", Password: "wrong"}, {Username: "default"}} {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, Protocol: clickhouse.HTTP, Auth: auth})
		if err != nil {
			return err
		}
		err = conn.Ping(context.Background())
		_ = conn.Close()
		var ex *clickhouse.Exception
		if !errors.As(err, &ex) || ex.Code != 516 {
			return fmt.Errorf("ping as %s with password %q: got %v; want exception 516", auth.Username, auth.Password, err)
		}
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, Protocol: clickhouse.HTTP, Auth: clickhouse.Auth{Username: "tally", Password: "pipe-secret"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM numbers(5)").Scan(&n); err != nil || n != 5 {
		return fmt.Errorf("query with the password: got %d, %v; want 5", n, err)
	}
	return nil
}

func rawQuery(s *Server, sql string) (int, string) {
	req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/", strings.NewReader(sql))
	req.SetBasicAuth("default", pipePassword)
	// A connection of its own: a kept-alive one that the server's idle timeout (3 s in these
	// tests) closes while the caller builds a large body is reused and fails with a broken pipe.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func runHelperProcess(t *testing.T, mode, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "CHEMBED_TEST_DIR="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %s: %v; stderr: %s", mode, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func TestStartOnLockedDirInAnotherProcess(t *testing.T) {
	t.Run("held by chembed", func(t *testing.T) {
		got := runHelperProcess(t, "start", sharedDir)
		if !strings.Contains(got, "open chDB data dir "+sharedDir) || !strings.Contains(got, "is another process using it?") {
			t.Fatalf("start in a second process: got %q; want an 'open chDB data dir ...; is another process using it?' error", got)
		}
	})
	t.Run("held by plain chDB", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		holder := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		holder.Env = append(os.Environ(), helperEnv+"=hold", "CHEMBED_TEST_DIR="+dir)
		stdin, err := holder.StdinPipe()
		if err != nil {
			t.Fatalf("holder stdin: %v", err)
		}
		stdout, err := holder.StdoutPipe()
		if err != nil {
			t.Fatalf("holder stdout: %v", err)
		}
		if err := holder.Start(); err != nil {
			t.Fatalf("start holder: %v", err)
		}
		defer func() {
			_ = stdin.Close()
			_ = holder.Wait()
		}()
		line := make([]byte, 8)
		if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "holding\n" {
			t.Fatalf("holder: got %q, %v; want %q", line, err, "holding\n")
		}
		got := runHelperProcess(t, "start", dir)
		if !strings.Contains(got, "open chDB data dir "+dir) || !strings.Contains(got, "is another process using it?") {
			t.Fatalf("start beside a chDB process: got %q; want an 'open chDB data dir ...; is another process using it?' error", got)
		}
	})
}

func TestStartInSameProcess(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	tests := []struct {
		name, dir, want string
	}{
		{"same dir", sharedDir, "is another process using it?"},
		{"other dir", t.TempDir(), "one per process"},
		{"no dir", "", "DataDir is required"},
		{"an option separator in the path", filepath.Join(t.TempDir(), "a&b"), "must not contain '?' or '&'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(Config{DataDir: tc.dir, Addr: "127.0.0.1:0", Logger: logger, Pipeline: User{Password: pipePassword}})
			if err == nil {
				_ = s.Close(context.Background())
				t.Fatalf("Start: got nil error; want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: got %q; want it to contain %q", err, tc.want)
			}
		})
	}
	// The shared session must be untouched by the refused starts.
	if status, body := rawQuery(shared, "SELECT 1"); status != 200 || body != "1\n" {
		t.Fatalf("shared server after refused starts: got %d %q; want 200 \"1\\n\"", status, body)
	}
}

// TestEngineRunsWithItsConfig: the engine starts with chembed's configuration file (config.go),
// which chDB takes from the connection's options.
func TestEngineRunsWithItsConfig(t *testing.T) {
	status, body := rawQuery(shared, "SELECT value, changed FROM system.merge_tree_settings WHERE name = 'merge_selector_base'")
	if status != 200 || body != "20\t1\n" {
		t.Fatalf("merge_selector_base: got %d %q; want 200 \"20\\t1\\n\" (changed by %s)", status, body, configName)
	}
}

func TestNilDereferencePanicsWithSessionOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=nilpanic", "CHEMBED_TEST_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "nil pointer dereference") {
		t.Fatalf("helper dereferencing nil: got %v, output %q; want exit status 2 with a nil pointer dereference panic", err, clip(string(out)))
	}
}

func TestLifecycleInFreshProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if got := runHelperProcess(t, "lifecycle", dir); got != "lifecycle ok" {
		t.Fatalf("lifecycle: got %q; want %q", got, "lifecycle ok")
	}
}

// newDatabase creates a database for one test and drops it afterwards.
func newDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", dbCounter.Add(1), strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name()))
	if status, body := rawQuery(shared, "CREATE DATABASE "+name); status != 200 {
		t.Fatalf("create database %s: got %d %s; want 200", name, status, body)
	}
	t.Cleanup(func() { rawQuery(shared, "DROP DATABASE IF EXISTS "+name) })
	return name
}

func openConn(t testing.TB, database string, compression *clickhouse.Compression) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{shared.Addr()},
		Protocol:    clickhouse.HTTP,
		Auth:        clickhouse.Auth{Database: database, Password: pipePassword},
		Compression: compression,
		DialTimeout: 5 * time.Second,
		ReadTimeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatalf("open clickhouse-go connection: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// eventRow is one row of the batch test table, generated from its index
// so that every value read back can be checked exactly.
type eventRow struct {
	ID    uint64
	Delta int64
	Name  string
	TS    time.Time
	TSms  time.Time
	Note  *string
	Kind  string
	Tags  []string
	Score float64
}

var eventBase = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

func makeEvent(i int) eventRow {
	r := eventRow{
		ID:    uint64(i),
		Delta: int64(i) * -7,
		Name:  fmt.Sprintf("name-%d 'q' \"dq\" \\ tab\there", i),
		TS:    eventBase.Add(time.Duration(i) * time.Second),
		TSms:  eventBase.Add(time.Duration(i) * time.Millisecond),
		Kind:  []string{"view", "like", "share", "ünïcode"}[i%4],
		Tags:  []string{},
		Score: float64(i) / 8,
	}
	if i%3 != 0 {
		n := fmt.Sprintf("note %d", i)
		r.Note = &n
	}
	for j := 0; j < i%3; j++ {
		r.Tags = append(r.Tags, fmt.Sprintf("tag%d", j))
	}
	return r
}

const eventsDDL = `CREATE TABLE events (
	id UInt64,
	delta Int64,
	name String,
	ts DateTime,
	ts_ms DateTime64(3),
	note Nullable(String),
	kind LowCardinality(String),
	tags Array(String),
	score Float64
) ENGINE = MergeTree ORDER BY id`

func insertEvents(ctx context.Context, conn driver.Conn, from, n int) error {
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO events")
	if err != nil {
		return fmt.Errorf("prepare batch: %w", err)
	}
	for i := from; i < from+n; i++ {
		r := makeEvent(i)
		if err := batch.Append(r.ID, r.Delta, r.Name, r.TS, r.TSms, r.Note, r.Kind, r.Tags, r.Score); err != nil {
			return fmt.Errorf("append row %d: %w", i, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("send batch: %w", err)
	}
	return nil
}

func TestClickhouseGoBatchRoundTrip(t *testing.T) {
	tests := []struct {
		name        string
		compression *clickhouse.Compression
		rows        int
	}{
		{"lz4 100k", &clickhouse.Compression{Method: clickhouse.CompressionLZ4}, 100_000},
		{"none", nil, 2_000},
		{"zstd", &clickhouse.Compression{Method: clickhouse.CompressionZSTD}, 2_000},
		{"gzip", &clickhouse.Compression{Method: clickhouse.CompressionGZIP}, 2_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			db := newDatabase(t)
			conn := openConn(t, db, tc.compression)
			if err := conn.Ping(ctx); err != nil {
				t.Fatalf("Ping: got %v; want nil", err)
			}
			if err := conn.Exec(ctx, eventsDDL); err != nil {
				t.Fatalf("Exec DDL: got %v; want nil", err)
			}
			if err := insertEvents(ctx, conn, 0, tc.rows); err != nil {
				t.Fatal(err)
			}
			var count uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM events").Scan(&count); err != nil {
				t.Fatalf("count: %v", err)
			}
			if count != uint64(tc.rows) {
				t.Fatalf("count: got %d; want %d", count, tc.rows)
			}
			rows, err := conn.Query(ctx, "SELECT id, delta, name, ts, ts_ms, note, kind, tags, score FROM events ORDER BY id")
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			defer rows.Close()
			i := 0
			for rows.Next() {
				var got eventRow
				if err := rows.Scan(&got.ID, &got.Delta, &got.Name, &got.TS, &got.TSms, &got.Note, &got.Kind, &got.Tags, &got.Score); err != nil {
					t.Fatalf("scan row %d: %v", i, err)
				}
				if want := makeEvent(i); !sameEvent(got, want) {
					t.Fatalf("row %d: got %+v; want %+v", i, got, want)
				}
				i++
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("rows: %v", err)
			}
			if i != tc.rows {
				t.Fatalf("rows read back: got %d; want %d", i, tc.rows)
			}
		})
	}
}

func sameEvent(a, b eventRow) bool {
	if a.ID != b.ID || a.Delta != b.Delta || a.Name != b.Name || !a.TS.Equal(b.TS) || !a.TSms.Equal(b.TSms) ||
		a.Kind != b.Kind || a.Score != b.Score || len(a.Tags) != len(b.Tags) || (a.Note == nil) != (b.Note == nil) {
		return false
	}
	if a.Note != nil && *a.Note != *b.Note {
		return false
	}
	for i := range a.Tags {
		if a.Tags[i] != b.Tags[i] {
			return false
		}
	}
	return true
}

func TestClickhouseGoParameters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := newDatabase(t)
	conn := openConn(t, db, &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
	if err := conn.Exec(ctx, "CREATE TABLE kv (k String, v UInt32) ENGINE = MergeTree ORDER BY k"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	if err := conn.Exec(ctx, "INSERT INTO kv VALUES ('a', 1), ('b''s', 2), ('c', 3)"); err != nil {
		t.Fatalf("insert: %v", err)
	}
	tricky := `it's a "test"; DROP TABLE kv; -- \ end`
	tests := []struct {
		name  string
		query string
		args  []any
		ctx   context.Context
		want  string
	}{
		{"named placeholder", "SELECT {s:String}", []any{clickhouse.Named("s", tricky)}, ctx, tricky},
		{"named filter", "SELECT toString(sum(v)) FROM kv WHERE k IN ({a:String}, {b:String})",
			[]any{clickhouse.Named("a", "a"), clickhouse.Named("b", "b's")}, ctx, "3"},
		{"positional", "SELECT toString(v) FROM kv WHERE k = ?", []any{"b's"}, ctx, "2"},
		{"at-named bind", "SELECT toString(v) FROM kv WHERE k = @k", []any{clickhouse.Named("k", "c")}, ctx, "3"},
		{"context parameters", "SELECT concat({x:String}, '/', toString({n:UInt8}))", nil,
			clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"x": tricky, "n": "7"})), tricky + "/7"},
		{"array parameter", "SELECT toString(arraySum({xs:Array(UInt16)}))", nil,
			clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"xs": "[1,2,3]"})), "6"},
		{"settings per query", "SELECT toString(getSetting('max_threads'))", nil,
			clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_threads": 1})), "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			if err := conn.QueryRow(tc.ctx, tc.query, tc.args...).Scan(&got); err != nil {
				t.Fatalf("QueryRow(%s): %v", tc.query, err)
			}
			if got != tc.want {
				t.Fatalf("QueryRow(%s): got %q; want %q", tc.query, got, tc.want)
			}
		})
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM kv").Scan(&n); err != nil || n != 3 {
		t.Fatalf("kv after parameter tests: got %d rows, err %v; want 3 rows", n, err)
	}
}

// TestClickhouseGoTypes reads back types whose Native encoding differs
// most between columns, through the revision re-encoding.
func TestClickhouseGoTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := openConn(t, "", &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
	var (
		id     string
		m      map[string]uint64
		enum   string
		ip     net.IP
		fixed  string
		tuple  []any
		nested [][]int32
		lcNull *string
		empty  []string
		when   time.Time
	)
	err := conn.QueryRow(ctx, `SELECT
		toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0'),
		map('a', 1, 'b', 2)::Map(String, UInt64),
		CAST('two' AS Enum8('one' = 1, 'two' = 2)),
		toIPv4('10.1.2.3'),
		toFixedString('ab', 4),
		tuple(1::UInt8, 'x'),
		[[1, -2], [], [3]]::Array(Array(Int32)),
		NULL::LowCardinality(Nullable(String)),
		[]::Array(String),
		toDateTime64('2024-03-01 12:00:00.123456', 6, 'Asia/Tokyo')`).Scan(&id, &m, &enum, &ip, &fixed, &tuple, &nested, &lcNull, &empty, &when)
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	checks := []struct {
		name      string
		got, want string
	}{
		{"uuid", id, "61f0c404-5cb3-11e7-907b-a6006ad3dba0"},
		{"map", fmt.Sprint(m), "map[a:1 b:2]"},
		{"enum", enum, "two"},
		{"ipv4", ip.String(), "10.1.2.3"},
		{"fixed string", fixed, "ab\x00\x00"},
		{"tuple", fmt.Sprint(tuple), "[1 x]"},
		{"nested array", fmt.Sprint(nested), "[[1 -2] [] [3]]"},
		{"low cardinality nullable", fmt.Sprint(lcNull), "<nil>"},
		{"empty array", fmt.Sprint(len(empty)), "0"},
		{"datetime64 with zone", when.UTC().Format(time.RFC3339Nano), "2024-03-01T03:00:00.123456Z"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Fatalf("got %q; want %q", c.got, c.want)
			}
		})
	}
}

func TestClickhouseGoAsyncInsert(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := openConn(t, newDatabase(t), &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
	if err := conn.Exec(ctx, "CREATE TABLE a (x UInt32, s String) ENGINE = MergeTree ORDER BY x"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	tests := []struct {
		name  string
		wait  bool
		query string
	}{
		{"wait", true, "INSERT INTO a VALUES (1, 'one')"},
		{"no wait", false, "INSERT INTO a VALUES (2, 'two')"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := conn.AsyncInsert(ctx, tc.query, tc.wait); err != nil {
				t.Fatalf("AsyncInsert: %v", err)
			}
			// The engine reads FROM INFILE synchronously, so even an
			// unawaited async insert is visible when the call returns.
			var n uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM a").Scan(&n); err != nil || n != uint64(i+1) {
				t.Fatalf("count after AsyncInsert: got %d, %v; want %d", n, err, i+1)
			}
		})
	}
}

func TestClickhouseGoErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := openConn(t, newDatabase(t), &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
	tests := []struct {
		name  string
		query string
		code  int32
	}{
		{"unknown table", "SELECT * FROM no_such_table", 60},
		{"syntax", "SELEKT 1", 62},
		{"failing mid-stream", "SELECT throwIf(number = 3), number FROM numbers(10) SETTINGS max_block_size = 1", 395},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := conn.Query(ctx, tc.query)
			if err == nil {
				rows.Close()
				t.Fatalf("Query(%s): got nil error; want code %d", tc.query, tc.code)
			}
			var ex *clickhouse.Exception
			if !errors.As(err, &ex) || ex.Code != tc.code {
				t.Fatalf("Query(%s): got %v; want a *clickhouse.Exception with code %d", tc.query, err, tc.code)
			}
			// A failed query must leave nothing behind for the next one.
			var one uint8
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("query after error: got %d, %v; want 1, nil", one, err)
			}
		})
	}
}

func TestConcurrentQueries(t *testing.T) {
	dbs := []string{newDatabase(t), newDatabase(t)}
	for i, db := range dbs {
		sql := fmt.Sprintf("CREATE TABLE %s.n (x UInt64) ENGINE = MergeTree ORDER BY x AS SELECT number * %d FROM numbers(1000)", db, i+1)
		if status, body := rawQuery(shared, sql); status != 200 {
			t.Fatalf("create %s.n: got %d %s", db, status, body)
		}
	}
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := 0; w < workers; w++ {
		conn := openConn(t, dbs[w%2], &clickhouse.Compression{Method: clickhouse.CompressionLZ4})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for i := 0; i < perWorker; i++ {
				threads := 1 + (w+i)%4
				qctx := clickhouse.Context(ctx,
					clickhouse.WithSettings(clickhouse.Settings{"max_threads": threads}),
					clickhouse.WithParameters(clickhouse.Parameters{"lim": fmt.Sprint(w*100 + i)}))
				var sum uint64
				var db, th string
				err := conn.QueryRow(qctx, "SELECT sum(x), currentDatabase(), toString(getSetting('max_threads')) FROM (SELECT x FROM n ORDER BY x LIMIT {lim:UInt32})").Scan(&sum, &db, &th)
				if err != nil {
					errs <- fmt.Errorf("worker %d query %d: %w", w, i, err)
					return
				}
				lim := uint64(w*100 + i)
				if want := uint64(w%2+1) * lim * (lim - 1) / 2; lim == 0 && sum != 0 || lim > 0 && sum != want {
					errs <- fmt.Errorf("worker %d query %d: sum got %d; want %d", w, i, sum, want)
				}
				if db != dbs[w%2] || th != fmt.Sprint(threads) {
					errs <- fmt.Errorf("worker %d query %d: database, max_threads got %s, %s; want %s, %d", w, i, db, th, dbs[w%2], threads)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// anonymousHeader marks a test request that must go without credentials;
// any other without its own is sent as the pipeline user.
const anonymousHeader = "X-Test-Anonymous"

func withPipelineAuth(req *http.Request) {
	if req.Header.Get(anonymousHeader) != "" {
		req.Header.Del(anonymousHeader)
		return
	}
	q := req.URL.Query()
	if req.Header.Get("Authorization") == "" && req.Header.Get("X-ClickHouse-User") == "" && req.Header.Get("X-ClickHouse-Key") == "" && !q.Has("user") && !q.Has("password") {
		req.SetBasicAuth("default", pipePassword)
	}
}

// httpDo sends one request to the shared server.
func httpDo(t testing.TB, method string, params url.Values, body string, header http.Header) (*http.Response, string) {
	t.Helper()
	u := "http://" + shared.Addr() + "/"
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	withPipelineAuth(req)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp, string(b)
}
